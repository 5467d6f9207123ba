/* updraft's plain C API: load a compiled model file (written by updraft.export) and run it, for
 * languages that call C. It wraps the C++ runtime (updraft/runtime.h) and has the same
 * behaviour: caller-owned buffers (zero copy), one model runnable from many threads at once.
 *
 *   updraft_model* m = NULL;
 *   if (updraft_model_load("mlp.updraft", NULL, &m) != UPDRAFT_OK) {
 *     fprintf(stderr, "%s\n", updraft_last_error());
 *     return 1;
 *   }
 *   int64_t in_shape[] = {1, 64}, out_shape[] = {1, 10};
 *   updraft_tensor in = {x, UPDRAFT_F32, 2, in_shape, NULL};
 *   updraft_tensor out = {y, UPDRAFT_F32, 2, out_shape, NULL};
 *   updraft_status st = updraft_model_run(m, &in, 1, &out, 1);
 *   updraft_model_free(m);
 *
 * Errors: every function that can fail returns an updraft_status; no C++ exception crosses this
 * API and nothing aborts. The message of the calling thread's last failure is
 * updraft_last_error() (each thread has its own; it stays valid until that thread's next
 * failing call). Strings and arrays a model hands out (names, shapes, the signature) live as
 * long as the model.
 */
#ifndef UPDRAFT_UPDRAFT_C_H
#define UPDRAFT_UPDRAFT_C_H

#include <stddef.h>
#include <stdint.h>

#ifndef UPDRAFT_C_API
#define UPDRAFT_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum updraft_status {
  UPDRAFT_OK = 0,
  UPDRAFT_ERR_INVALID_ARGUMENT = 1, /* a NULL pointer, a bad option or dtype, an index out of range */
  UPDRAFT_ERR_FILE = 2,             /* the model file cannot be opened or read */
  UPDRAFT_ERR_BAD_MODEL = 3,        /* truncated, corrupt, newer format, or needs CPU features this machine lacks */
  UPDRAFT_ERR_SHAPE = 4,            /* inputs or output buffers that do not fit the model's signature */
  UPDRAFT_ERR_RUNTIME = 5,          /* a failure while running */
  UPDRAFT_ERR_OUT_OF_MEMORY = 6,
  UPDRAFT_ERR_INTERNAL = 7          /* anything else (a bug: please report it) */
} updraft_status;

/* Element types, in the engine's order (updraft::runtime::DType). */
typedef enum updraft_dtype {
  UPDRAFT_F32 = 0,
  UPDRAFT_F64,
  UPDRAFT_F16,
  UPDRAFT_BF16,
  UPDRAFT_I64,
  UPDRAFT_I32,
  UPDRAFT_I16,
  UPDRAFT_I8,
  UPDRAFT_U8,
  UPDRAFT_BOOL
} updraft_dtype;

typedef struct updraft_model updraft_model; /* opaque */

/* A caller-owned tensor. strides (in elements) may be NULL: contiguous. Outputs must be
 * contiguous. A size input (updraft_io_info.is_size) is a 0-d i64 tensor (ndim 0) holding the value. */
typedef struct updraft_tensor {
  void* data;
  int32_t dtype; /* an updraft_dtype (a fixed-size field: any value is checked, never trusted) */
  int ndim;
  const int64_t* shape;
  const int64_t* strides;
} updraft_tensor;

typedef struct updraft_load_options {
  int num_threads; /* threads one run uses; 0: all cores */
  int map;         /* nonzero: map the file (weights used in place, shared between processes) */
} updraft_load_options;

/* One input or output of a model. Pointers stay valid while the model lives. */
typedef struct updraft_io_info {
  const char* name;
  updraft_dtype dtype;
  int ndim;                /* 0 for a size input */
  const int64_t* shape;    /* -1 where symbolic */
  const char* const* dims; /* each dim as text ("128", "s0", "(s1+1)"); a size input: one entry, its symbol */
  int is_size;             /* a size input: its value binds dims[0]'s symbol */
} updraft_io_info;

/* The defaults: all cores, mapped. */
UPDRAFT_C_API updraft_load_options updraft_load_options_default(void);

/* Loads a model file. opts may be NULL (the defaults). On failure *out is NULL. */
UPDRAFT_C_API updraft_status updraft_model_load(const char* path, const updraft_load_options* opts,
                                                updraft_model** out);
/* Frees a model (NULL is fine). No run may be in progress on it. */
UPDRAFT_C_API void updraft_model_free(updraft_model* model);

UPDRAFT_C_API size_t updraft_model_num_inputs(const updraft_model* model);  /* 0 for NULL */
UPDRAFT_C_API size_t updraft_model_num_outputs(const updraft_model* model); /* 0 for NULL */
UPDRAFT_C_API updraft_status updraft_model_input_info(const updraft_model* model, size_t index,
                                                      updraft_io_info* out);
UPDRAFT_C_API updraft_status updraft_model_output_info(const updraft_model* model, size_t index,
                                                       updraft_io_info* out);
/* The symbols of the inputs' dims with the range of sizes the model was exported for (max is
 * INT64_MAX where unbounded). */
UPDRAFT_C_API size_t updraft_model_num_symbols(const updraft_model* model); /* 0 for NULL */
UPDRAFT_C_API updraft_status updraft_model_symbol(const updraft_model* model, size_t index, const char** name,
                                                  int64_t* min, int64_t* max);
/* The signature as text (inputs, outputs, symbol ranges); NULL for NULL. */
UPDRAFT_C_API const char* updraft_model_signature(const updraft_model* model);

/* The output shapes for these inputs' shapes (their data is not read, except a size input's
 * value). Output k's dims are written at out_dims[o_k .. o_k + ndim_k), where o_k is the sum of
 * the ranks of the outputs before it (updraft_model_output_info gives each rank); out_len is
 * the room in out_dims. Builds the plan for these shapes once. */
UPDRAFT_C_API updraft_status updraft_model_output_shapes(updraft_model* model, const updraft_tensor* inputs,
                                                         size_t num_inputs, int64_t* out_dims, size_t out_len);
/* Bytes of working memory one run with these inputs' shapes uses. */
UPDRAFT_C_API updraft_status updraft_model_arena_bytes(updraft_model* model, const updraft_tensor* inputs,
                                                       size_t num_inputs, size_t* out_bytes);
/* Runs the model: inputs read in place, outputs written into the caller's buffers. Thread-safe. */
UPDRAFT_C_API updraft_status updraft_model_run(updraft_model* model, const updraft_tensor* inputs,
                                               size_t num_inputs, const updraft_tensor* outputs,
                                               size_t num_outputs);

/* The calling thread's last failure message ("" if none). */
UPDRAFT_C_API const char* updraft_last_error(void);
/* "UPDRAFT_OK", "UPDRAFT_ERR_SHAPE", ... */
UPDRAFT_C_API const char* updraft_status_name(int status);
UPDRAFT_C_API const char* updraft_dtype_name(int dtype); /* an updraft_dtype: "f32", ...; "?" if unknown */
UPDRAFT_C_API size_t updraft_dtype_size(int dtype);      /* 0 if unknown */
UPDRAFT_C_API const char* updraft_version(void);

#ifdef __cplusplus
}
#endif

#endif /* UPDRAFT_UPDRAFT_C_H */
