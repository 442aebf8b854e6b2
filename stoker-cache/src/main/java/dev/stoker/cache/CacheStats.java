package dev.stoker.cache;

/**
 * What a cache did since it opened: lookups that found an entry ({@code hits}), found none ({@code misses}) or found a
 * torn or damaged one ({@code corrupt}: not served, removed, recomputed by the caller, also counted as a miss); entries
 * written and the bytes read and written (as stored, compressed); entries removed for the budget ({@code evicted}) and
 * not admitted because the budget was held by entries this run still uses ({@code rejected}); the stored bytes and
 * entries now, and the budget.
 */
public record CacheStats(long hits, long misses, long corrupt, long written, long writeFailures, long rawBytesRead,
                         long storedBytesRead, long rawBytesWritten, long storedBytesWritten, long evicted, long rejected,
                         long entries, long storedBytes, long budgetBytes) {
    /** hits / (hits + misses); 0 before any lookup. */
    public double hitRate() {
        long n = hits + misses;
        return n == 0 ? 0 : (double) hits / n;
    }
}
