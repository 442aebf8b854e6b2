package dev.stoker.store;

import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A sealed, immutable object of the store: the bytes {@link #bytes()} long at {@link #offset()} of
 * {@link #file()}, where a reader in another process maps them. Reference counted: the creator's
 * hold (from {@link Allocation#seal()}) plus one per open {@link Lease}; when the count reaches
 * zero the segment goes back to the store for reuse and the views of this object must no longer be
 * read.
 *
 * <p>Threading: all methods are thread-safe; the count is a lock-free atomic.
 */
public final class StoredObject {
    private final ShmObjectStore store;
    private final ShmSegment shm;
    private final long id;
    private final long bytes;
    private final MemorySegment view;
    private final AtomicInteger references = new AtomicInteger(1);
    private final AtomicBoolean creatorReleased = new AtomicBoolean();

    StoredObject(ShmObjectStore store, ShmSegment shm, long id, long bytes) {
        this.store = store;
        this.shm = shm;
        this.id = id;
        this.bytes = bytes;
        this.view = shm.mapping.asSlice(0, bytes).asReadOnly();
    }

    /** Unique within the store. */
    public long id() { return id; }

    /** The segment file that holds the object. */
    public Path file() { return shm.file; }

    /** Where the object starts within {@link #file()} (always 0: one object per segment). */
    public long offset() { return 0; }

    public long bytes() { return bytes; }

    /** Read-only view of the object's bytes in this process. */
    public MemorySegment segment() { return view; }

    /**
     * Takes one more reference.
     *
     * @throws IllegalStateException when the count already reached zero (the segment may be reused)
     */
    public Lease lease() {
        int n;
        do {
            n = references.get();
            if (n <= 0) throw new IllegalStateException("object " + id + " was already released; it can no longer be leased");
        } while (!references.compareAndSet(n, n + 1));
        store.leaseOpened();
        return new ObjectLease(this);
    }

    /**
     * Drops the creator's hold (the reference {@link Allocation#seal()} returned with).
     *
     * @throws IllegalStateException when called a second time
     */
    public void release() {
        if (!creatorReleased.compareAndSet(false, true)) {
            throw new IllegalStateException("object " + id + " was already released by its creator");
        }
        drop();
    }

    /** The current count: the creator's hold (until released) plus the open leases. */
    public int references() { return references.get(); }

    void drop() {
        int n = references.decrementAndGet();
        if (n < 0) throw new IllegalStateException("object " + id + " released below zero references");
        if (n == 0) store.recycle(shm, true);
    }

    @Override
    public String toString() {
        return "StoredObject[" + id + ", " + bytes + " bytes in " + shm.file + ", refs " + references.get() + "]";
    }

    private static final class ObjectLease implements Lease {
        private final StoredObject object;
        private final AtomicBoolean closed = new AtomicBoolean();

        ObjectLease(StoredObject object) { this.object = object; }

        @Override public long objectId() { return object.id; }

        @Override public StoredObject object() { return object; }

        @Override
        public void close() {
            if (closed.compareAndSet(false, true)) {
                object.store.leaseClosed();
                object.drop();
            }
        }

        @Override
        public String toString() {
            return "Lease[object " + object.id + (closed.get() ? ", closed]" : "]");
        }
    }
}
