#include <assert.h>
long sum_to(long n);
int main(void) { assert(sum_to(1) == 1); assert(sum_to(0) == 0); assert(sum_to(100) == 5050); return 0; }
