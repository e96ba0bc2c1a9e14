/* mhe params - placeholder until the calculator lands */
static int cmd_params(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "mhe: params is not built yet\n"); return 1; }
