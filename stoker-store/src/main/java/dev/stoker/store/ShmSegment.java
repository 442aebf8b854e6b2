package dev.stoker.store;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * One segment file of an arena and its read-write mapping; holds one object at a time. Mapped in
 * its own shared {@link Arena}, so deleting the segment unmaps it and any later access through a
 * stale view throws {@link IllegalStateException} instead of faulting.
 */
final class ShmSegment {
    private static final System.Logger LOG = System.getLogger(ShmSegment.class.getName());

    final long number;
    final Path file;
    final long capacityBytes;
    private final Arena arena;
    final MemorySegment mapping;
    /** Who the object now in this segment counts against ({@link ShmObjectStore#allocate(long, int)}); −1: nobody. Guarded by the store's lock. */
    int owner = -1;
    /**
     * The leading bytes of the file that have pages in memory (zero-filled and faulted in); the rest, up to the capacity, was
     * given back to the kernel when a smaller object reused the segment ({@link ShmObjectStore#REUSE_FACTOR}). Guarded by the
     * store's lock; the pages themselves change only while the segment is out of the free pool.
     */
    long backedBytes;
    /** When the segment last went back to the free pool ({@link System#nanoTime}). Guarded by the store's lock. */
    long releasedNanos;
    /** How many requests the store had admitted when the segment last went back to the free pool. Guarded by the store's lock. */
    long releasedAtAdmission;

    ShmSegment(long number, Path file, long capacityBytes, Arena arena, MemorySegment mapping) {
        this.number = number;
        this.file = file;
        this.capacityBytes = capacityBytes;
        this.arena = arena;
        this.mapping = mapping;
        this.backedBytes = capacityBytes;
    }

    /** Unmaps and deletes the file; failures are logged, never thrown (used on cleanup paths). */
    void unmapAndDelete() {
        try {
            arena.close();
        } catch (IllegalStateException e) {
            // Only possible while some thread holds the mapping in a native call or an I/O operation;
            // the mapping then lives until the arena becomes unreachable, the file goes now regardless.
            LOG.log(System.Logger.Level.WARNING, "segment " + file + " is still in use, unmapping deferred", e);
        }
        try {
            Files.deleteIfExists(file);
        } catch (IOException e) {
            LOG.log(System.Logger.Level.WARNING, "cannot delete segment " + file, e);
        }
    }

    @Override
    public String toString() {
        return "segment " + file + " (" + capacityBytes + " bytes)";
    }
}
