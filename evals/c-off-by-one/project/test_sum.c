#include <assert.h>
#include <stdio.h>
long sum_to(long n);
int main(void) { assert(sum_to(4) == 10); puts("ok"); return 0; }
