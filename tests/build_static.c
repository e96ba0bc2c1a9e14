/* MHE_STATIC: every function static; unused ones must not warn. */
#define MHE_STATIC
#define MHE_IMPLEMENTATION
#include "../mhe.h"
int main(void) { return mhe_status_str(MHE_OK)[0] == 'o' ? 0 : 1; }
