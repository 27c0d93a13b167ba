#!/usr/bin/env bash
# run.sh — seeded-fault (mutation) testing of lyco (NUMERICS.md §4.10).
#
# For every entry of tests/mutants/catalogue.txt: apply the find/replace to a private copy of the
# repository, rebuild incrementally, run the CI gate's test tier (ctest -L quick), record whether
# the fault was killed, restore the file. The repository this script lives in is only read.
#
#   tests/mutants/run.sh                 every mutant against the whole quick tier (the CI gate)
#   tests/mutants/run.sh --only ID[,ID]  just these mutants
#   tests/mutants/run.sh --list          list the catalogue and check every anchor (no build)
#   tests/mutants/run.sh --fast          a faster, smaller gate (see below); not the CI gate
#
# Options: --jobs N (build/ctest parallelism, default 2), --timeout S (per test, default 300),
#   --work DIR (work directory; kept afterwards; reused snapshot if DIR/lyco exists), --keep (keep
#   the temporary work directory), --allow-red-baseline (judge the tests that fail on the
#   unmutated copy by new FAIL lines, see below, instead of stopping), --exclude-tests REGEX (leave
#   these ctest tests out of the gate, e.g. to see which mutants a test is the only one to kill;
#   the result line then says so).
#   CMake flags: MUTANT_CMAKE_FLAGS (default "-DLYCO_WERROR=ON -DLYCO_CUDA=OFF", as CI builds).
#
# Seeds: the tests draw random data (LYCO_SEED or the clock). One seed is fixed for the whole run
# — LYCO_SEED when set, else one drawn now and printed — so the baseline and every mutant see the
# same data and a kill is caused by the mutant, not by a different draw. Rerun with another
# LYCO_SEED to check that the kills do not depend on the data.
#
# A red baseline (--allow-red-baseline): the gate tests that pass on the unmutated copy are run as
# usual; each test that fails there is run on its own, and the mutant is killed by it when it
# reports a FAIL line (keyed by its first three fields: case, direction, dtypes for `lyco check`)
# that the baseline did not, or when it crashes or times out.
#
# The copy is HEAD plus the current working tree: every tracked file as it is on disk plus every
# untracked file git does not ignore (git ls-files -co --exclude-standard); builds, .git and
# virtual environments are not copied.
#
# Verdicts: "killed" (some gate test failed or timed out; the first failing tests are named),
# "killed (build)" (the mutant does not compile — counted as killed but listed apart, since it
# tests the compiler, not the tests), "SURVIVED" (the gate passed). The gate runs the quick tests
# that took under a tenth of the slowest one's time on the baseline first and the others after,
# each phase with --stop-on-failure, so a killed mutant stops early; a survivor has passed every
# quick test.
#
# --fast runs: test_convert, test_policy, test_golden, test_gradcheck, test_bad_input, the four
#   small tests added for this catalogue (test_cvt_paths, test_score, test_overlap,
#   test_conv_geometry: ~3 s in all) and `lyco check --backend eager --dtypes bf16,fp32` (the
#   eager twin against the oracle;
#   `--backend ref` would compare the oracle with itself and could not see a fault in the
#   oracle's numerics).
#
# Output: one line per mutant, then "killed K/N" (N = every mutant run). Exit status 0 when every
# mutant was killed, 1 when any survived, 2 on a setup error (bad catalogue entry, an anchor that
# does not occur exactly once, a red baseline without --allow-red-baseline).
set -u -o pipefail
export LC_ALL=C
shopt -u patsub_replacement 2>/dev/null || true   # '&' in a replacement stays literal

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CATALOGUE=$HERE/catalogue.txt

JOBS=2
TIMEOUT=300
ONLY=""
MODE=full
LIST=0
WORK=""
KEEP=0
ALLOW_RED=0
EXCL_USER=""
CMAKE_FLAGS=${MUTANT_CMAKE_FLAGS:--DLYCO_WERROR=ON -DLYCO_CUDA=OFF}

usage() { sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
    --only) ONLY=${2:?--only needs an id}; shift ;;
    --only=*) ONLY=${1#--only=} ;;
    --list) LIST=1 ;;
    --fast) MODE=fast ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift ;;
    --timeout) TIMEOUT=${2:?--timeout needs seconds}; shift ;;
    --work) WORK=${2:?--work needs a directory}; KEEP=1; shift ;;
    --keep) KEEP=1 ;;
    --allow-red-baseline) ALLOW_RED=1 ;;
    --exclude-tests) EXCL_USER=${2:?--exclude-tests needs a regex}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done

# ---- the catalogue -----------------------------------------------------------------------------
IDS=(); FILES=(); DESCS=(); FINDS=(); REPLS=()
parse_catalogue() {
    local line n=-1 lineno=0 key val
    local -A seen=()
    while IFS= read -r line || [ -n "$line" ]; do
        lineno=$((lineno + 1))
        case "$line" in
        '#'*|'') continue ;;
        '['*']')
            n=$((n + 1))
            IDS[n]=${line:1:${#line}-2}
            FILES[n]=""; DESCS[n]=""; FINDS[n]=$'\x01'; REPLS[n]=$'\x01'
            if [ -n "${seen[${IDS[n]}]:-}" ]; then echo "catalogue:$lineno: duplicate id ${IDS[n]}" >&2; return 1; fi
            seen[${IDS[n]}]=1
            continue ;;
        esac
        if [ $n -lt 0 ]; then echo "catalogue:$lineno: text before the first [id]" >&2; return 1; fi
        key=${line%%:*}
        if [ "$line" = "$key:" ]; then val=""
        elif [ "${line:0:${#key}+2}" = "$key: " ]; then val=${line:${#key}+2}
        else echo "catalogue:$lineno: expected 'key: value'" >&2; return 1; fi
        case "$key" in
        file) FILES[n]=$val ;;
        desc) DESCS[n]=$val ;;
        find) FINDS[n]=$val ;;
        repl) REPLS[n]=$val ;;
        *) echo "catalogue:$lineno: unknown key '$key'" >&2; return 1 ;;
        esac
    done < "$CATALOGUE"
    local i
    for i in "${!IDS[@]}"; do
        if [ -z "${FILES[i]}" ] || [ "${FINDS[i]}" = $'\x01' ] || [ -z "${FINDS[i]}" ] || [ "${REPLS[i]}" = $'\x01' ]; then
            echo "catalogue: entry ${IDS[i]} needs file:, a non-empty find: and repl:" >&2; return 1
        fi
        if [ "${FINDS[i]}" = "${REPLS[i]}" ]; then echo "catalogue: entry ${IDS[i]}: repl equals find" >&2; return 1; fi
    done
}
parse_catalogue || exit 2

# occurrences of literal $2 in file $1
count_in() {
    local content rest
    content=$(cat "$1" && printf x) || return 1
    content=${content%x}
    rest=${content//"$2"/}
    echo $(( (${#content} - ${#rest}) / ${#2} ))
}

# selected entries
SEL=()
if [ -n "$ONLY" ]; then
    IFS=',' read -r -a want <<< "$ONLY"
    for w in "${want[@]}"; do
        found=0
        for i in "${!IDS[@]}"; do [ "${IDS[i]}" = "$w" ] && SEL+=("$i") && found=1; done
        [ $found = 1 ] || { echo "run.sh: no mutant '$w' in the catalogue (see --list)" >&2; exit 2; }
    done
else
    SEL=("${!IDS[@]}")
fi

check_anchors() {  # $1 = root; prints problems; returns 1 if any
    local bad=0 i c
    for i in "${SEL[@]}"; do
        if [ ! -f "$1/${FILES[i]}" ]; then
            echo "ANCHOR ERROR ${IDS[i]}: ${FILES[i]} does not exist" >&2; bad=1; continue
        fi
        c=$(count_in "$1/${FILES[i]}" "${FINDS[i]}")
        if [ "$c" != 1 ]; then
            echo "ANCHOR ERROR ${IDS[i]}: the anchor occurs $c times in ${FILES[i]} (expected exactly once): ${FINDS[i]}" >&2; bad=1
        fi
    done
    return $bad
}

if [ $LIST = 1 ]; then
    for i in "${SEL[@]}"; do
        st=ok
        if [ ! -f "$REPO/${FILES[i]}" ]; then st="missing file"
        else c=$(count_in "$REPO/${FILES[i]}" "${FINDS[i]}"); [ "$c" = 1 ] || st="anchor x$c"; fi
        printf '%-36s %-22s %-8s %s\n' "${IDS[i]}" "${FILES[i]}" "$st" "${DESCS[i]}"
    done
    echo "${#SEL[@]} mutants"
    check_anchors "$REPO" 2>/dev/null || exit 2
    exit 0
fi

# ---- the private copy --------------------------------------------------------------------------
if [ -z "$WORK" ]; then WORK=$(mktemp -d "${TMPDIR:-/tmp}/lyco-mutants.XXXXXX") || exit 2; fi
mkdir -p "$WORK/logs" "$WORK/pristine" || exit 2
SRC=$WORK/lyco
BUILD=$SRC/build
cleanup() {
    local i
    # put every mutated file back (a no-op unless interrupted mid-mutant)
    for i in "${SEL[@]}"; do
        [ -f "$WORK/pristine/${FILES[i]}" ] && cp "$WORK/pristine/${FILES[i]}" "$SRC/${FILES[i]}" 2>/dev/null && touch "$SRC/${FILES[i]}"
    done
    if [ $KEEP = 0 ] && [ "${ANY_BAD:-1}" = 0 ]; then rm -rf "$WORK"; else echo "work directory (logs in logs/): $WORK"; fi
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

if [ ! -d "$SRC" ]; then
    mkdir -p "$SRC"
    if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        (cd "$REPO" && git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
            [ -e "$f" ] && printf '%s\0' "$f"; done | tar --null -T - -cf -) | tar -C "$SRC" -xf - || { echo "run.sh: copy failed" >&2; exit 2; }
        HEADREV=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null)
        DIRTY=$(git -C "$REPO" diff --name-only HEAD 2>/dev/null | wc -l)
        echo "copy: $REPO at $HEADREV + working tree ($DIRTY files differ from HEAD) -> $SRC"
    else
        (cd "$REPO" && tar --exclude='./build*' --exclude='./.venv*' --exclude='./.git' -cf - .) | tar -C "$SRC" -xf - || exit 2
        echo "copy: $REPO (not a git checkout) -> $SRC"
    fi
else
    echo "reusing the copy in $SRC"
fi
for i in "${SEL[@]}"; do
    mkdir -p "$(dirname "$WORK/pristine/${FILES[i]}")"
    [ -f "$WORK/pristine/${FILES[i]}" ] || cp "$SRC/${FILES[i]}" "$WORK/pristine/${FILES[i]}" 2>/dev/null
done
check_anchors "$SRC" || { echo "run.sh: fix the catalogue (anchors must match exactly once)" >&2; exit 2; }

if [ -z "${LYCO_SEED:-}" ]; then LYCO_SEED=$(( $(date +%s) * 1000003 % 4294967291 )); fi
export LYCO_SEED
echo "LYCO_SEED=$LYCO_SEED (one seed for the baseline and every mutant); cmake flags: $CMAKE_FLAGS; gate: $MODE"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    # shellcheck disable=SC2086
    cmake -S "$SRC" -B "$BUILD" $CMAKE_FLAGS > "$WORK/logs/configure.log" 2>&1 || { echo "run.sh: cmake configure failed, see $WORK/logs/configure.log" >&2; exit 2; }
fi

build() { cmake --build "$BUILD" -j "$JOBS" > "$1" 2>&1; }

# ---- the gate ----------------------------------------------------------------------------------
FAST_TESTS=""   # regex of the green quick tests run first (the fast ones on the baseline)
SLOW_TESTS=""   # regex of the other green quick tests
RED=()          # tests red on the baseline (only with --allow-red-baseline)

# FAIL keys of a test log: the first three fields of every FAIL line
fail_keys() { grep -E '^FAIL|[[:space:]]FAIL[[:space:]]' "$1" | awk '{ $0 = $0; if ($1 == "FAIL") print $1, $2, $3, $4; else print $1, $2, $3 }' | sort -u; }

# ctest over a name regex; appends to the log; sets FAILED to the failing tests
run_ctest() {  # $1 = regex, $2 = log
    (cd "$BUILD" && ctest -L quick -j "$JOBS" --timeout "$TIMEOUT" --stop-on-failure --output-on-failure -R "$1") >> "$2" 2>&1
    local rc=$?
    FAILED=$(sed -n '/The following tests FAILED:/,$p' "$2" | sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (\(.*\))$/\1(\2)/p' | sort -u | tr '\n' ' ')
    FAILED=${FAILED% }
    [ $rc -ne 0 ] && [ -z "$FAILED" ] && FAILED="ctest(rc $rc)"
    return $rc
}

# one baseline-red test on its own: 0 when it fails exactly as on the baseline (or better)
run_red() {  # $1 = test, $2 = log
    local tl=$2.$1 st new
    (cd "$BUILD" && ctest -L quick --timeout "$TIMEOUT" --output-on-failure -R "^$1\$") > "$tl" 2>&1
    cat "$tl" >> "$2"
    st=$(sed -n 's/^[[:space:]]*[0-9]* - [^ ]* (\(.*\))$/\1/p' "$tl" | head -1)
    if [ -n "$st" ] && [ "$st" != Failed ]; then FAILED="$1($st)"; rm -f "$tl"; return 1; fi
    new=$(comm -13 "$WORK/logs/baseline.red.$1.keys" <(fail_keys "$tl") | head -3 | tr '\n' ';')
    rm -f "$tl"
    if [ -n "$new" ]; then FAILED="$1(new FAIL: ${new%;})"; return 1; fi
    return 0
}

run_fast() {  # $1 = log
    local t rc=0
    FAILED=""
    local cmds=(
        "convert|$BUILD/tests/test_convert"
        "policy|$BUILD/tests/test_policy"
        "golden|$BUILD/tests/test_golden $SRC/tests/data/golden"
        "gradcheck|$BUILD/tests/test_gradcheck"
        "cvt_paths|$BUILD/tests/test_cvt_paths"
        "score|$BUILD/tests/test_score"
        "overlap|$BUILD/tests/test_overlap"
        "conv_geometry|$BUILD/tests/test_conv_geometry"
        "bad_input|$BUILD/tests/test_bad_input"
        "check_eager_bf16_fp32|$BUILD/lyco check --backend eager --dtypes bf16,fp32"
    )
    for t in "${cmds[@]}"; do
        local name=${t%%|*} cmd=${t#*|}
        echo "== $name: $cmd" >> "$1"
        # shellcheck disable=SC2086
        (timeout "$TIMEOUT" $cmd; exit $?) > "$1.one" 2>&1   # a subshell, so a crash report lands in the log
        rc=$?
        cat "$1.one" >> "$1"
        if [ -n "${2:-}" ]; then   # baseline: remember red ones
            if [ $rc -ne 0 ]; then RED+=("$name"); fail_keys "$1.one" > "$WORK/logs/baseline.red.$name.keys"; fi
            continue
        fi
        if [ $rc -ne 0 ] && [ -f "$WORK/logs/baseline.red.$name.keys" ] && [ $rc -ne 124 ] && [ $rc -lt 128 ]; then
            local new
            new=$(comm -13 "$WORK/logs/baseline.red.$name.keys" <(fail_keys "$1.one") | head -3 | tr '\n' ';')
            [ -z "$new" ] && continue
            FAILED="$name(new FAIL: ${new%;})"; rm -f "$1.one"; return 1
        fi
        if [ $rc -ne 0 ]; then FAILED="$name($([ $rc = 124 ] && echo Timeout || echo rc $rc))"; rm -f "$1.one"; return 1; fi
    done
    rm -f "$1.one"
    return 0
}

run_gate() {  # $1 = log; returns 0 when every gate test passed
    local rc=0 t
    if [ $MODE = fast ]; then run_fast "$1"; return; fi
    if [ -n "$FAST_TESTS" ]; then run_ctest "$FAST_TESTS" "$1" || return 1; fi
    if [ -n "$SLOW_TESTS" ]; then run_ctest "$SLOW_TESTS" "$1" || return 1; fi
    for t in "${RED[@]}"; do run_red "$t" "$1" || return 1; done
    return 0
}

# ---- baseline: the unmutated copy must build and pass the gate ----------------------------------
T0=$(date +%s)
echo "baseline: building and running the gate on the unmutated copy …"
if ! build "$WORK/logs/baseline.build.log"; then
    echo "run.sh: the unmutated copy does not build; see $WORK/logs/baseline.build.log" >&2; exit 2
fi
BLOG=$WORK/logs/baseline.log
: > "$BLOG"
if [ $MODE = full ]; then
    (cd "$BUILD" && ctest -L quick -j "$JOBS" --timeout "$TIMEOUT" --output-on-failure) > "$BLOG" 2>&1
    mapfile -t RED < <(sed -n '/The following tests FAILED:/,$p' "$BLOG" | sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (.*)$/\1/p' | sort -u)
    if [ -n "$EXCL_USER" ]; then
        kept=(); for t in "${RED[@]}"; do [[ $t =~ $EXCL_USER ]] || kept+=("$t"); done; RED=("${kept[@]}")
    fi
    # split the green tests by their baseline times: those under a tenth of the slowest first
    fast=(); slow=()
    times=$(sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) \.*[^0-9]*\([0-9.]*\) sec$/\1 \2/p' "$BLOG")
    tmax=$(echo "$times" | awk '$2 > m { m = $2 } END { print m + 0 }')
    while read -r name secs; do
        [ -z "$name" ] && continue
        [[ " ${RED[*]} " == *" $name "* ]] && continue
        [ -n "$EXCL_USER" ] && [[ $name =~ $EXCL_USER ]] && continue
        if awk -v s="$secs" -v m="$tmax" 'BEGIN { exit !(s < m / 10) }'; then fast+=("$name"); else slow+=("$name"); fi
    done <<< "$times"
    [ ${#fast[@]} -gt 0 ] && FAST_TESTS="^($(IFS='|'; echo "${fast[*]}"))\$"
    [ ${#slow[@]} -gt 0 ] && SLOW_TESTS="^($(IFS='|'; echo "${slow[*]}"))\$"
    ntests=$(( ${#fast[@]} + ${#slow[@]} + ${#RED[@]} ))
else
    run_fast "$BLOG" baseline
    ntests=10
fi
PARTIAL=""
[ -n "$EXCL_USER" ] && [ $MODE = full ] && PARTIAL=" (tests matching $EXCL_USER left out of the gate)"
if [ ${#RED[@]} -gt 0 ]; then
    echo "baseline is RED: failing on the unmutated copy: ${RED[*]} (see $BLOG)" >&2
    if [ $ALLOW_RED = 0 ]; then
        echo "run.sh: a mutant cannot be judged against a failing gate; fix the tree or pass --allow-red-baseline" >&2
        exit 2
    fi
    if [ $MODE = full ]; then
        for t in "${RED[@]}"; do   # each red test twice: its FAIL lines must be reproducible
            for k in 1 2; do
                (cd "$BUILD" && ctest -L quick --timeout "$TIMEOUT" --output-on-failure -R "^$t\$") > "$WORK/logs/baseline.red.$t.$k.log" 2>&1
                fail_keys "$WORK/logs/baseline.red.$t.$k.log" > "$WORK/logs/baseline.red.$t.$k.keys"
            done
            if ! cmp -s "$WORK/logs/baseline.red.$t.1.keys" "$WORK/logs/baseline.red.$t.2.keys"; then
                echo "run.sh: $t fails differently on two baseline runs with the same seed; it cannot judge mutants" >&2; exit 2
            fi
            mv "$WORK/logs/baseline.red.$t.1.keys" "$WORK/logs/baseline.red.$t.keys"
            echo "  $t: $(wc -l < "$WORK/logs/baseline.red.$t.keys") FAIL lines on the baseline (reproducible)"
        done
    fi
    PARTIAL="$PARTIAL (baseline RED: ${RED[*]} judged by new FAIL lines only)"
fi
echo "baseline: $ntests tests$PARTIAL; $(( $(date +%s) - T0 )) s"
[ $MODE = full ] && echo "gate: [$FAST_TESTS], then [$SLOW_TESTS]${RED:+, then red ${RED[*]} one by one}"

# ---- the mutants -------------------------------------------------------------------------------
K=0; KB=0; S=0; N=0
SURVIVORS=()
ANY_BAD=0
total=${#SEL[@]}
for i in "${SEL[@]}"; do
    id=${IDS[i]}; f=${FILES[i]}
    N=$((N + 1))
    log=$WORK/logs/$id.log
    t1=$(date +%s)
    {
        echo "mutant $id: ${DESCS[i]}"
        echo "file:   $f"
        echo "find:   ${FINDS[i]}"
        echo "repl:   ${REPLS[i]}"
    } > "$log"
    content=$(cat "$WORK/pristine/$f" && printf x); content=${content%x}
    rest=${content//"${FINDS[i]}"/}
    c=$(( (${#content} - ${#rest}) / ${#FINDS[i]} ))
    if [ "$c" != 1 ]; then
        echo "ANCHOR ERROR $id: the anchor occurs $c times in $f" >&2; exit 2
    fi
    printf '%s' "${content/"${FINDS[i]}"/"${REPLS[i]}"}" > "$SRC/$f"
    touch "$SRC/$f"
    if ! build "$log.build"; then
        why=$(grep -m1 -E 'error|Error' "$log.build" | sed 's/^[^ ]*\/src\//src\//' | cut -c1-90)
        verdict="killed (build)"; detail=$why
        K=$((K + 1)); KB=$((KB + 1))
    elif run_gate "$log"; then
        verdict="SURVIVED"; detail="every gate test passed"
        S=$((S + 1)); SURVIVORS+=("$id"); ANY_BAD=1
    else
        verdict="killed"; detail="by ${FAILED:-?}"
        K=$((K + 1))
    fi
    { echo "== build"; cat "$log.build"; } >> "$log" 2>/dev/null; rm -f "$log.build"
    # restore (fresh mtime so the next build recompiles the pristine file)
    cp "$WORK/pristine/$f" "$SRC/$f"
    touch "$SRC/$f"
    printf '[%2d/%d] %-36s %-15s %4ss  %s\n' "$N" "$total" "$id" "$verdict" "$(( $(date +%s) - t1 ))" "$detail"
done

# leave the copy's build matching the pristine sources
build "$WORK/logs/final.build.log" || echo "warning: the restored copy did not rebuild (see logs/final.build.log)" >&2

echo
echo "mutants: $N run, $K killed ($KB of them by a build failure), $S survived${PARTIAL}; gate: $MODE; $(( $(date +%s) - T0 )) s"
[ $S -gt 0 ] && echo "survivors: ${SURVIVORS[*]}"
echo "killed $K/$N"
[ $S -eq 0 ] || exit 1
exit 0
