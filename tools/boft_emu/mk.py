#!/usr/bin/env python3
"""mk.py OUT [BUDGET] — host-emulation copy of src/cuda/boft_group.cu: dynamic shared memory
becomes the emulated block's buffer, every kernel<<<grid, NT, smem, st>>>(args) a synchronous
emu_launch; BUDGET (floats) replaces BG_BUDGET to force small chunks."""
import os, re, sys
here = os.path.dirname(os.path.abspath(__file__))
s = open(os.path.join(here, '../../src/cuda/boft_group.cu')).read()
s = s.replace('extern __shared__ float sm[];', 'float *sm = emu_smem;')
s, n = re.subn(r'(\w+(?:<\w+>)?)<<<([^,]+), NT, ([^,]+), st>>>\((.*?)\);', r'emu_launch(\2, \3, [&]{ \1(\4); });', s)
assert n == 4, n
if len(sys.argv) > 2:
    s = s.replace('#define BG_BUDGET ((i64)16 << 20)', '#define BG_BUDGET ((i64)%s)' % sys.argv[2])
open(sys.argv[1], 'w').write(s)
