// Our own minimal declaration of ONNX Runtime's C API: just the slots jiffy_vs_ort calls, for
// loading libonnxruntime.so at run time with dlopen (no ORT header is installed).
//
// ORT's C API is a table of function pointers (OrtApi) returned by OrtApiBase::GetApi(version).
// The table only ever grows at its end, so the first ~100 slots are the same in every 1.x
// release. Each slot is declared below in ORT's order; slots we never call are `void*`
// placeholders, named after ORT's entry so the count can be checked against the real header
// (include/onnxruntime/core/session/onnxruntime_c_api.h). The static_asserts pin every slot we
// call to its index; bench/ort_peer.cpp also checks the table at run time on a 1-node model.
#pragma once
#include <cstddef>
#include <cstdint>

namespace jiffy::ort {

// Opaque ORT objects (only ever handled through pointers).
struct Status;
struct Env;
struct SessionOptions;
struct Session;
struct MemoryInfo;
struct Value;
struct RunOptions;

// Values of ORT's enums that we pass.
constexpr int kLogWarning = 2;          // OrtLoggingLevel ORT_LOGGING_LEVEL_WARNING
constexpr int kLogError = 3;            // ORT_LOGGING_LEVEL_ERROR
constexpr int kEnableAll = 99;          // GraphOptimizationLevel ORT_ENABLE_ALL
constexpr int kSequential = 0;          // ExecutionMode ORT_SEQUENTIAL
constexpr int kDeviceAllocator = 0;     // OrtAllocatorType OrtDeviceAllocator
constexpr int kMemTypeDefault = 0;      // OrtMemType OrtMemTypeDefault
constexpr int kErrInvalidArgument = 2;  // OrtErrorCode ORT_INVALID_ARGUMENT
// Tensor element types are ONNX's TensorProto codes, the same numbers as jiffy::DType.

constexpr uint32_t kApiVersion = 13;  // the oldest table that has every slot below

// A null Status* means success; a non-null one must be released with ReleaseStatus.
using StatusPtr = Status*;

struct Api {
    StatusPtr (*CreateStatus)(int code, const char* msg);                                 //   0
    int (*GetErrorCode)(const Status* s);                                                 //   1
    const char* (*GetErrorMessage)(const Status* s);                                      //   2
    StatusPtr (*CreateEnv)(int log_level, const char* logid, Env** out);                  //   3
    void* CreateEnvWithCustomLogger;                                                      //   4
    void* EnableTelemetryEvents;                                                          //   5
    void* DisableTelemetryEvents;                                                         //   6
    StatusPtr (*CreateSession)(const Env* env, const char* path, const SessionOptions* o,
                               Session** out);                                            //   7
    void* CreateSessionFromArray;                                                         //   8
    StatusPtr (*Run)(Session* s, const RunOptions* ro, const char* const* in_names,
                     const Value* const* inputs, size_t n_in, const char* const* out_names,
                     size_t n_out, Value** outputs);                                      //   9
    StatusPtr (*CreateSessionOptions)(SessionOptions** out);                              //  10
    void* SetOptimizedModelFilePath;                                                      //  11
    void* CloneSessionOptions;                                                            //  12
    StatusPtr (*SetSessionExecutionMode)(SessionOptions* o, int mode);                    //  13
    StatusPtr (*EnableProfiling)(SessionOptions* o, const char* file_prefix);              //  14
    void* DisableProfiling;                                                               //  15
    void* EnableMemPattern;                                                               //  16
    void* DisableMemPattern;                                                              //  17
    void* EnableCpuMemArena;                                                              //  18
    void* DisableCpuMemArena;                                                             //  19
    void* SetSessionLogId;                                                                //  20
    void* SetSessionLogVerbosityLevel;                                                    //  21
    StatusPtr (*SetSessionLogSeverityLevel)(SessionOptions* o, int level);                //  22
    StatusPtr (*SetSessionGraphOptimizationLevel)(SessionOptions* o, int level);          //  23
    StatusPtr (*SetIntraOpNumThreads)(SessionOptions* o, int n);                          //  24
    StatusPtr (*SetInterOpNumThreads)(SessionOptions* o, int n);                          //  25
    void* CreateCustomOpDomain;                                                           //  26
    void* CustomOpDomain_Add;                                                             //  27
    void* AddCustomOpDomain;                                                              //  28
    void* RegisterCustomOpsLibrary;                                                       //  29
    StatusPtr (*SessionGetInputCount)(const Session* s, size_t* out);                     //  30
    StatusPtr (*SessionGetOutputCount)(const Session* s, size_t* out);                    //  31
    void* SessionGetOverridableInitializerCount;                                          //  32
    void* SessionGetInputTypeInfo;                                                        //  33
    void* SessionGetOutputTypeInfo;                                                       //  34
    void* SessionGetOverridableInitializerTypeInfo;                                       //  35
    void* SessionGetInputName;                                                            //  36
    void* SessionGetOutputName;                                                           //  37
    void* SessionGetOverridableInitializerName;                                           //  38
    void* CreateRunOptions;                                                               //  39
    void* RunOptionsSetRunLogVerbosityLevel;                                              //  40
    void* RunOptionsSetRunLogSeverityLevel;                                               //  41
    void* RunOptionsSetRunTag;                                                            //  42
    void* RunOptionsGetRunLogVerbosityLevel;                                              //  43
    void* RunOptionsGetRunLogSeverityLevel;                                               //  44
    void* RunOptionsGetRunTag;                                                            //  45
    void* RunOptionsSetTerminate;                                                         //  46
    void* RunOptionsUnsetTerminate;                                                       //  47
    void* CreateTensorAsOrtValue;                                                         //  48
    StatusPtr (*CreateTensorWithDataAsOrtValue)(const MemoryInfo* info, void* data, size_t nbytes,
                                                const int64_t* shape, size_t rank, int elem_type,
                                                Value** out);                             //  49
    StatusPtr (*IsTensor)(const Value* v, int* out);                                      //  50
    StatusPtr (*GetTensorMutableData)(Value* v, void** out);                              //  51
    void* FillStringTensor;                                                               //  52
    void* GetStringTensorDataLength;                                                      //  53
    void* GetStringTensorContent;                                                         //  54
    void* CastTypeInfoToTensorInfo;                                                       //  55
    void* GetOnnxTypeFromTypeInfo;                                                        //  56
    void* CreateTensorTypeAndShapeInfo;                                                   //  57
    void* SetTensorElementType;                                                           //  58
    void* SetDimensions;                                                                  //  59
    void* GetTensorElementType;                                                           //  60
    void* GetDimensionsCount;                                                             //  61
    void* GetDimensions;                                                                  //  62
    void* GetSymbolicDimensions;                                                          //  63
    void* GetTensorShapeElementCount;                                                     //  64
    void* GetTensorTypeAndShape;                                                          //  65
    void* GetTypeInfo;                                                                    //  66
    void* GetValueType;                                                                   //  67
    void* CreateMemoryInfo;                                                               //  68
    StatusPtr (*CreateCpuMemoryInfo)(int allocator_type, int mem_type, MemoryInfo** out); //  69
    void* CompareMemoryInfo;                                                              //  70
    void* MemoryInfoGetName;                                                              //  71
    StatusPtr (*MemoryInfoGetId)(const MemoryInfo* m, int* out);                          //  72
    void* MemoryInfoGetMemType;                                                           //  73
    void* MemoryInfoGetType;                                                              //  74
    void* AllocatorAlloc;                                                                 //  75
    void* AllocatorFree;                                                                  //  76
    void* AllocatorGetInfo;                                                               //  77
    void* GetAllocatorWithDefaultOptions;                                                 //  78
    void* AddFreeDimensionOverride;                                                       //  79
    void* GetValue;                                                                       //  80
    void* GetValueCount;                                                                  //  81
    void* CreateValue;                                                                    //  82
    void* CreateOpaqueValue;                                                              //  83
    void* GetOpaqueValue;                                                                 //  84
    void* KernelInfoGetAttribute_float;                                                   //  85
    void* KernelInfoGetAttribute_int64;                                                   //  86
    void* KernelInfoGetAttribute_string;                                                  //  87
    void* KernelContext_GetInputCount;                                                    //  88
    void* KernelContext_GetOutputCount;                                                   //  89
    void* KernelContext_GetInput;                                                         //  90
    void* KernelContext_GetOutput;                                                        //  91
    void (*ReleaseEnv)(Env* p);                                                           //  92
    void (*ReleaseStatus)(Status* p);                                                     //  93
    void (*ReleaseMemoryInfo)(MemoryInfo* p);                                             //  94
    void (*ReleaseSession)(Session* p);                                                   //  95
    void (*ReleaseValue)(Value* p);                                                       //  96
    void* ReleaseRunOptions;                                                              //  97
    void* ReleaseTypeInfo;                                                                //  98
    void* ReleaseTensorTypeAndShapeInfo;                                                  //  99
    void (*ReleaseSessionOptions)(SessionOptions* p);                                     // 100
    // ... later slots are not declared (we never index past 100).
};

struct ApiBase {
    const Api* (*GetApi)(uint32_t version);
    const char* (*GetVersionString)();
};

using GetApiBaseFn = const ApiBase* (*)();  // the library's exported `OrtGetApiBase`

#define JIFFY_ORT_SLOT(field, index) static_assert(offsetof(Api, field) == (index) * sizeof(void*), #field)
JIFFY_ORT_SLOT(GetErrorMessage, 2);
JIFFY_ORT_SLOT(CreateEnv, 3);
JIFFY_ORT_SLOT(CreateSession, 7);
JIFFY_ORT_SLOT(Run, 9);
JIFFY_ORT_SLOT(CreateSessionOptions, 10);
JIFFY_ORT_SLOT(SetSessionExecutionMode, 13);
JIFFY_ORT_SLOT(EnableProfiling, 14);
JIFFY_ORT_SLOT(SetSessionLogSeverityLevel, 22);
JIFFY_ORT_SLOT(SetSessionGraphOptimizationLevel, 23);
JIFFY_ORT_SLOT(SetIntraOpNumThreads, 24);
JIFFY_ORT_SLOT(SetInterOpNumThreads, 25);
JIFFY_ORT_SLOT(SessionGetInputCount, 30);
JIFFY_ORT_SLOT(SessionGetOutputCount, 31);
JIFFY_ORT_SLOT(CreateTensorWithDataAsOrtValue, 49);
JIFFY_ORT_SLOT(IsTensor, 50);
JIFFY_ORT_SLOT(GetTensorMutableData, 51);
JIFFY_ORT_SLOT(CreateCpuMemoryInfo, 69);
JIFFY_ORT_SLOT(MemoryInfoGetId, 72);
JIFFY_ORT_SLOT(ReleaseEnv, 92);
JIFFY_ORT_SLOT(ReleaseStatus, 93);
JIFFY_ORT_SLOT(ReleaseMemoryInfo, 94);
JIFFY_ORT_SLOT(ReleaseSession, 95);
JIFFY_ORT_SLOT(ReleaseValue, 96);
JIFFY_ORT_SLOT(ReleaseSessionOptions, 100);
#undef JIFFY_ORT_SLOT

}  // namespace jiffy::ort
