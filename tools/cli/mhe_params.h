/* mhe_params.h - `mhe params`, the parameter and memory tables of the MHE
   paper (tools/cli/mhe_params.c, linked into the mhe tool). */
#ifndef MHE_PARAMS_H
#define MHE_PARAMS_H

/* argv[1] is "params"; prints the tables, returns the exit status */
int cmd_params(int argc, char **argv);

#endif
