package dev.stoker.store;

import java.lang.foreign.MemorySegment;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One writable object of the store, not yet visible to readers: write it once through
 * {@link #segment()}, then {@link #seal()} it, or {@link #abort()} to give the space back.
 *
 * <p>The bytes are not cleared: a reused segment still holds the previous object's bytes, so the
 * writer must fill every byte it publishes.
 *
 * <p>Threading: the writer may be any thread (or several, on disjoint ranges); {@code seal} and
 * {@code abort} are safe to race, exactly one of them wins.
 */
public final class Allocation {
    private static final int OPEN = 0, SEALED = 1, ABORTED = 2;

    private final ShmObjectStore store;
    private final ShmSegment shm;
    private final long bytes;
    private final MemorySegment view;
    private final AtomicInteger state = new AtomicInteger(OPEN);

    Allocation(ShmObjectStore store, ShmSegment shm, long bytes) {
        this.store = store;
        this.shm = shm;
        this.bytes = bytes;
        this.view = shm.mapping.asSlice(0, bytes);
    }

    /** Read-write view of exactly {@link #bytes()} bytes; its start is page aligned (so 64-byte aligned). */
    public MemorySegment segment() { return view; }

    public long bytes() { return bytes; }

    /**
     * Publishes the object: from now on it is immutable by contract and holds one reference, the
     * caller's, dropped by {@link StoredObject#release()}.
     *
     * @throws IllegalStateException when already sealed or aborted, or when the store is closed
     */
    public StoredObject seal() {
        if (store.isClosed()) throw new IllegalStateException("store closed");
        if (!state.compareAndSet(OPEN, SEALED)) {
            throw new IllegalStateException(state.get() == SEALED ? "allocation already sealed" : "allocation was aborted");
        }
        return store.sealed(shm, bytes);
    }

    /** Gives the space back without publishing; idempotent, and a no-op after {@link #seal()}. */
    public void abort() {
        if (state.compareAndSet(OPEN, ABORTED)) store.recycle(shm, false);
    }

    @Override
    public String toString() {
        return "Allocation[" + bytes + " bytes in " + shm.file + "]";
    }
}
