// Sets flush-to-zero and denormals-are-zero at load; threads created later inherit it.
#include <pmmintrin.h>
#include <xmmintrin.h>
__attribute__((constructor)) static void ftz(void) {
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
}
