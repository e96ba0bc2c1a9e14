// The header compiles as C++ (extern "C" API) and may be included twice.
#include "../mhe.h"
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "../mhe.h"
int main() {
    mhe_config c = mhe_config_default();
    mhe_model m;
    if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK) return 1;
    mhe_model_free(&m);
    return 0;
}
