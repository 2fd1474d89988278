// libcublasLt.so: the backend never calls cuBLASLt; the library only has to be there, as cuBLAS
// needs it on a real machine and the library search loads it first.
extern "C" __attribute__((visibility("default"))) int fake_cublaslt_present() { return 1; }
