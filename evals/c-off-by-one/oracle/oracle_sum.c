#include <stdio.h>
long sum_to(long n);
int main(void) { for (long n = 0; n < 2000; n++) if (sum_to(n) != n * (n + 1) / 2) { printf("sum_to(%ld)\n", n); return 1; } puts("ok"); return 0; }
