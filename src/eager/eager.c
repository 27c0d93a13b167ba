/* eager.c — placeholder */
#include "api/api.h"

lyco_status lyco_eager_run(const lyco_call *c) {
    return lyco_fail(LYCO_ERR_UNSUPPORTED, "eager: %s not written yet", lyco_algo_name(c->a->algo));
}
