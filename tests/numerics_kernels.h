/* tests/numerics_kernels.h - what tests/numerics_kernels.c exports, twice */
typedef struct nk_api {
    int (*isnan_)(float), (*self_neq)(float), (*isinf_)(float), (*lib_finite)(float);
    float (*exp_)(float);
    void (*gelu)(float *, const float *, int);
    void (*gelu_bwd)(float *, const float *, const float *, int);
    void (*softmax)(float *, const float *, int, int);
    void (*xent)(float *, const float *, const int *, int, int);
    void (*layernorm)(float *, const float *, const float *, const float *, int, int);
    float (*sum)(const float *, int);
    int (*train_nan)(const char *, float *);
    int (*forward_nan)(const char *, int, float *);
} nk_api;
const nk_api *nk_get_std(void);
const nk_api *nk_get_fast(void);
