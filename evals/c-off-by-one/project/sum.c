long sum_to(long n) {
    long s = 0;
    for (long i = 1; i < n; i++) s += i;
    return s;
}
