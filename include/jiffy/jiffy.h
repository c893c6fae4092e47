/* Jiffy C API: load -> compile(shapes) -> run.
 *
 *   char err[512];
 *   jiffy_model* m = jiffy_model_load("model.onnx", err, sizeof err);   // NULL on error
 *   const char* names[] = {"input"};
 *   int64_t dims[] = {1, 1280}; int ranks[] = {2};
 *   jiffy_plan* p = jiffy_compile(m, 1, names, ranks, dims, err, sizeof err);
 *   jiffy_runner* r = jiffy_runner_new(p);
 *   memcpy(jiffy_runner_input(r, 0), audio, jiffy_plan_input_nbytes(p, 0));
 *   if (jiffy_run(r, err, sizeof err) != 0) { ... }                     // no allocation inside
 *   const float* y = (const float*)jiffy_runner_output(r, 0);
 *   jiffy_runner_free(r); jiffy_plan_free(p); jiffy_model_free(m);
 *
 * Return codes: 0 ok, 1 internal error, 2 bad model or input, 3 unsupported. Error messages name
 * the file / node / tensor. Models and plans may be shared between threads; runners may not.
 */
#ifndef JIFFY_H_
#define JIFFY_H_
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct jiffy_model jiffy_model;
typedef struct jiffy_plan jiffy_plan;
typedef struct jiffy_runner jiffy_runner;

jiffy_model* jiffy_model_load(const char* path, char* err, size_t err_size);
void jiffy_model_free(jiffy_model* m);
/* Shapes for n_inputs named inputs: ranks[i] dims each, concatenated in dims. */
jiffy_plan* jiffy_compile(jiffy_model* m, int n_inputs, const char* const* names, const int* ranks,
                          const int64_t* dims, char* err, size_t err_size);
void jiffy_plan_free(jiffy_plan* p);
int jiffy_plan_num_inputs(const jiffy_plan* p);
int jiffy_plan_num_outputs(const jiffy_plan* p);
const char* jiffy_plan_input_name(const jiffy_plan* p, int i);
const char* jiffy_plan_output_name(const jiffy_plan* p, int i);
size_t jiffy_plan_input_nbytes(const jiffy_plan* p, int i);
size_t jiffy_plan_output_nbytes(const jiffy_plan* p, int i);
/* Rank of output i; writes up to max_dims dims. */
int jiffy_plan_output_shape(const jiffy_plan* p, int i, int64_t* dims, int max_dims);

jiffy_runner* jiffy_runner_new(const jiffy_plan* p);
void jiffy_runner_free(jiffy_runner* r);
void* jiffy_runner_input(jiffy_runner* r, int i);
const void* jiffy_runner_output(const jiffy_runner* r, int i);
void jiffy_runner_bind_input(jiffy_runner* r, int i, const void* data);
void jiffy_runner_bind_output(jiffy_runner* r, int i, void* data);
int jiffy_run(jiffy_runner* r, char* err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif /* JIFFY_H_ */
