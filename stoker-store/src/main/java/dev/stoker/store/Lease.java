package dev.stoker.store;

/**
 * One reference to a {@link StoredObject}: while any lease (or the creator's hold) is open, the
 * object's segment is neither reused nor deleted, so its bytes stay as sealed.
 *
 * <p>Threading: may be closed from any thread; {@link #close()} is idempotent.
 */
public interface Lease extends AutoCloseable {
    long objectId();

    StoredObject object();

    /** Drops this reference; the last one returns the object's segment to the store. */
    @Override
    void close();
}
