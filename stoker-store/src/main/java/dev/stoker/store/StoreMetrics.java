package dev.stoker.store;

/**
 * A snapshot of one store's accounting and counters.
 *
 * @param budgetBytes       the configured hard limit
 * @param mappedBytes       capacities of all segment files that exist or are being created (in use +
 *                          free); never above {@code budgetBytes}
 * @param inUseBytes        capacities of the segments that hold an open allocation or a referenced
 *                          object ({@code mappedBytes - inUseBytes} is the free pool, plus segments in
 *                          flight)
 * @param objects           sealed objects whose references have not yet dropped to zero
 * @param leases            leases currently open (the creator's hold from {@code seal} is not a lease)
 * @param allocations       allocations handed out since the store opened
 * @param allocationWaits   allocations that had to queue for budget
 * @param waitNanos         total time those allocations spent queued
 * @param segmentsCreated   segment files created
 * @param segmentsReused    allocations served by a free segment instead of a new file
 * @param segmentsDeleted   free segments deleted to make room for another size (close not counted)
 * @param staleArenasRemoved arenas of dead processes removed when the store opened
 * @param segmentsReplaced  free segments deleted because a new, larger one was made in their stead (also in
 *                          {@code segmentsDeleted})
 * @param residentBytes     the segments' pages in memory now (in use and free; a segment being made counts whole)
 * @param residentLimitBytes the pages free segments may keep beyond it ({@link ShmObjectStore#limitResident}); 0: no limit
 * @param returnedBytes     pages released segments gave back to keep within that limit, since the store opened
 */
public record StoreMetrics(long budgetBytes, long mappedBytes, long inUseBytes, long objects, long leases,
                           long allocations, long allocationWaits, long waitNanos, long segmentsCreated,
                           long segmentsReused, long segmentsDeleted, long staleArenasRemoved, long segmentsReplaced,
                           long residentBytes, long residentLimitBytes, long returnedBytes) {
}
