/* The C API (updraft/updraft_c.h): loads a model file whose inputs are all f32 tensors, runs it
 * on zeros (each symbolic dim at the smallest size its range allows) and prints each output's shape and first element.
 *
 *   run_model_c MODEL.updraft
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <updraft/updraft_c.h>

static size_t numel(const int64_t* shape, int ndim) {
  size_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= (size_t)shape[d];
  return n;
}

/* The smallest size the model takes for a symbolic dim (at least 1). */
static int64_t smallest(const updraft_model* model, const char* dim) {
  for (size_t i = 0; i < updraft_model_num_symbols(model); ++i) {
    const char* name;
    int64_t lo, hi;
    if (updraft_model_symbol(model, i, &name, &lo, &hi) == UPDRAFT_OK && strcmp(name, dim) == 0) return lo > 1 ? lo : 1;
  }
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.updraft\n", argv[0]);
    return 2;
  }
  updraft_model* model = NULL;
  updraft_status st = updraft_model_load(argv[1], NULL, &model);
  if (st != UPDRAFT_OK) {
    fprintf(stderr, "%s: %s\n", updraft_status_name(st), updraft_last_error());
    return 1;
  }
  size_t nin = updraft_model_num_inputs(model), nout = updraft_model_num_outputs(model);
  updraft_tensor* in = calloc(nin, sizeof(updraft_tensor));
  updraft_tensor* out = calloc(nout, sizeof(updraft_tensor));
  int64_t* in_dims = calloc(nin * 8, sizeof(int64_t));
  int64_t* out_dims = calloc(nout * 8 + 1, sizeof(int64_t));
  int rc = 0;
  for (size_t k = 0; k < nin; ++k) {
    updraft_io_info info;
    updraft_model_input_info(model, k, &info);
    if (info.dtype != UPDRAFT_F32 || info.is_size) {
      fprintf(stderr, "input %s is not an f32 tensor; this example runs f32 inputs only\n", info.name);
      rc = 1;
      goto done;
    }
    for (int d = 0; d < info.ndim; ++d)
      in_dims[k * 8 + d] = info.shape[d] < 0 ? smallest(model, info.dims[d]) : info.shape[d];
    in[k].dtype = UPDRAFT_F32;
    in[k].ndim = info.ndim;
    in[k].shape = in_dims + k * 8;
    in[k].data = calloc(numel(in[k].shape, info.ndim) + 1, sizeof(float));
  }
  st = updraft_model_output_shapes(model, in, nin, out_dims, nout * 8);
  if (st != UPDRAFT_OK) {
    fprintf(stderr, "%s: %s\n", updraft_status_name(st), updraft_last_error());
    rc = 1;
    goto done;
  }
  {
    const int64_t* next = out_dims;
    for (size_t k = 0; k < nout; ++k) {
      updraft_io_info info;
      updraft_model_output_info(model, k, &info);
      out[k].dtype = info.dtype;
      out[k].ndim = info.ndim;
      out[k].shape = next;
      out[k].data = calloc(numel(next, info.ndim) + 1, updraft_dtype_size(info.dtype));
      next += info.ndim;
    }
  }
  st = updraft_model_run(model, in, nin, out, nout);
  if (st != UPDRAFT_OK) {
    fprintf(stderr, "%s: %s\n", updraft_status_name(st), updraft_last_error());
    rc = 1;
    goto done;
  }
  for (size_t k = 0; k < nout; ++k) {
    updraft_io_info info;
    updraft_model_output_info(model, k, &info);
    printf("output %s %s rank %d", info.name, updraft_dtype_name(info.dtype), info.ndim);
    if (info.dtype == UPDRAFT_F32 && numel(out[k].shape, out[k].ndim) > 0)
      printf(" first %g", (double)((float*)out[k].data)[0]);
    printf("\n");
  }
done:
  for (size_t k = 0; k < nin; ++k) free(in[k].data);
  for (size_t k = 0; k < nout; ++k) free(out[k].data);
  free(in);
  free(out);
  free(in_dims);
  free(out_dims);
  updraft_model_free(model);
  return rc;
}
