package dev.stoker.store;

import static java.nio.file.LinkOption.NOFOLLOW_LINKS;
import static java.nio.file.StandardOpenOption.CREATE_NEW;
import static java.nio.file.StandardOpenOption.READ;
import static java.nio.file.StandardOpenOption.WRITE;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.FileChannel.MapMode;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.FileSystemException;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.FileAttribute;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The node-local shared-memory object store: finished batches are written once into segment files
 * on a tmpfs ({@code /dev/shm}); trainer processes on the same node map those files and read the
 * tensors in place, so only references ({@link StoredObject#file()}, {@link StoredObject#offset()},
 * {@link StoredObject#bytes()}) travel between processes.
 *
 * <h2>Design</h2>
 *
 * <p>Arena: each store owns one directory, {@code <directory>/<instanceName>-<pid>-<hex>} (mode
 * 0700), holding its segment files {@code seg-<n>} (mode 0600, {@code n} never reused) and
 * {@code arena.lock}, on which the store holds an exclusive {@link FileLock} for its whole life. The
 * kernel drops that lock when the process dies, even by {@code kill -9}, so a lock that can be taken
 * marks the arena of a dead process: {@link #open} removes such arenas (matching its own instance
 * name, real folders of this user only, through open directory handles that never follow a link:
 * {@link StaleArenas}) before creating its own. A lock held in this JVM shows up as
 * {@link OverlappingFileLockException} and a lock held by another live process as a failed
 * {@code tryLock}; both arenas are left alone. A new arena is created, then its lock file, then
 * locked; if another store's cleanup got to the lock first (the lock file is gone after locking, or
 * the lock is refused), the store starts over under a new name.
 *
 * <p>Segments: one object per segment, so an object's bytes are never moved and a released
 * segment can be handed to the next writer whole. A segment's capacity is the request rounded up
 * to a size class (whole MiB up to 8 MiB, then 8 classes per power of two, capped at the budget),
 * so that batches of similar size reuse each other's segments. A new segment file is filled with
 * zeros through its channel before it is mapped: that makes tmpfs allocate every page up front, so
 * a full file system is an {@code IOException} ("No space left on device") at creation, not a
 * {@code SIGBUS} in the middle of a write through the mapping. Each segment is mapped in its own
 * shared {@link Arena}; deleting the segment closes it, after which stale views in this process
 * throw {@link IllegalStateException} rather than read freed memory. Reused segments are not
 * cleared (the writer overwrites them).
 *
 * <p>Resident bytes: without a resident limit ({@link #limitResident}, the default) a segment keeps every page it was
 * given, for speed — the rules of this paragraph, the replacement and the passed-over rule below apply only under a limit.
 * Under one, a segment reused for an object whose size class is well below the pages it has in memory (more than
 * {@link #TRIM_SLACK} over) gives the pages past that size class back to the kernel ({@code madvise(MADV_REMOVE)}, a hole
 * in the tmpfs file), and one reused for more than it has in memory gets those pages zero-filled and faulted in again on
 * the maker thread before it is handed out, as a new segment is (so a full file system is still an exception, never a
 * {@code SIGBUS}). Without this, free segments up to {@link #REUSE_FACTOR} times too large served every smaller batch
 * with all their pages resident, and the store's memory crept towards its in-flight objects times the largest batch
 * (issue 30's memory item: 0.9–1.2 GB mapped for batches of 87 MB on average, six in flight).
 *
 * <p>Budget: {@code mappedBytes}, the capacities of all segments that exist or are being created
 * (in use + free), never exceeds {@link StoreConfig#budgetBytes()}; the sum of the segment files'
 * sizes therefore never does either (a file is counted before it is created and until after it is
 * deleted). A request is served, in order of preference, by: the smallest free segment whose
 * capacity is at least the request and at most eight times its size class ({@link #REUSE_FACTOR}: a new segment costs fresh pages); a new segment, when it fits
 * the budget — made in the stead of the largest free segment too small for the request, if any ({@link #replacedLocked}),
 * so that the segments do not outnumber the objects in flight; a new segment after deleting free segments, least recently released first, when
 * that makes room. Otherwise it waits until a release frees space. Waiters are served in arrival
 * order: a request never overtakes an earlier one, so a big request cannot be starved by a stream
 * of small ones — except that a request whose owner already holds its share of the budget
 * ({@link #shareAmong}, e.g. one share per trainer rank) steps aside until that owner releases
 * something, so a consumer that stops reading cannot stall the others. An object that is referenced is never touched: only free segments are
 * reused or deleted; there is no eviction.
 *
 * <p>Concurrency: one lock guards the accounting, the free pool and the wait queue, and is held
 * only for bookkeeping. File work (zero-fill, mapping, deleting segments to make room) runs on one
 * platform thread, {@code stoker-store-maker}, never under the lock and never on the caller of
 * {@link #allocate}. Futures are completed outside the lock: a request served from the free pool
 * completes on the thread that called {@code allocate} or that released the segment; one that
 * needed a new segment completes on a fresh virtual thread (never on the maker, which a dependent
 * stage waiting for another new segment would otherwise deadlock). While the maker deletes segments for the head of the queue, the
 * queue pauses (the deleted bytes are still counted until the files are gone); plain creations do
 * not pause it. Reference counts are lock-free atomics; only the drop to zero takes the lock.
 *
 * <p>Threading: every public method is thread-safe.
 */
public final class ShmObjectStore implements AutoCloseable {
    static final String LOCK_FILE = "arena.lock";
    static final String SEGMENT_PREFIX = "seg-";
    static final long MIB = 1L << 20;
    private static final int ZERO_CHUNK_BYTES = 1 << 20;
    private static final long PAGE_BYTES = 4096;
    /** The largest free segment, relative to the request's size class, that a request takes instead of making a new one. */
    static final long REUSE_FACTOR = 8;
    /** A reused segment keeps up to this fraction of the object's size class above it in memory before trimming (hysteresis). */
    static final double TRIM_SLACK = 0.25;
    /**
     * A free segment passed over by this many admitted requests per share (each took another segment or made one) is deleted
     * when another segment comes back ({@link #dropIdleLocked}): it is more than the objects in flight turn over.
     */
    static final int PASSED_OVER_PER_SHARE = 8;
    /** A free segment that no request took for this long is deleted when another segment comes back ({@link #dropIdleLocked}). */
    static final long IDLE_NANOS_DEFAULT = java.util.concurrent.TimeUnit.SECONDS.toNanos(10);
    private static final int MADV_REMOVE = 9; // Linux <sys/mman.h>
    private static final java.lang.invoke.MethodHandle MADVISE = java.lang.foreign.Linker.nativeLinker().downcallHandle(
            java.lang.foreign.Linker.nativeLinker().defaultLookup().find("madvise").orElseThrow(),
            java.lang.foreign.FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT));
    private static final int ARENA_ATTEMPTS = 8;
    private static final long CLOSE_WAIT_SECONDS = 30;
    private static final FileAttribute<Set<PosixFilePermission>> DIR_MODE =
            PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------"));
    private static final FileAttribute<Set<PosixFilePermission>> FILE_MODE =
            PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------"));
    private static final System.Logger LOG = System.getLogger(ShmObjectStore.class.getName());
    private static final SecureRandom RANDOM = new SecureRandom();

    private final StoreConfig config;
    /** The hard limit; only ever raised ({@link #raiseBudget}), so what is mapped never exceeds it. */
    private volatile long budgetBytes;
    /** Pages the segments may keep in memory ({@link #limitResident}); Long.MAX_VALUE: a free segment keeps all of its. */
    private volatile long residentLimitBytes = Long.MAX_VALUE;
    /** Pages released segments gave back to stay within {@link #residentLimitBytes}. Guarded by lock. */
    private long returnedBytes;
    /** The largest object a writer means to ask for ({@link #limitObjects}); Long.MAX_VALUE: no limit but the budget. */
    private volatile long objectLimitBytes = Long.MAX_VALUE;
    /** Why {@link #objectLimitBytes} is what it is, for the writer's refusal. */
    private volatile String objectLimitReason = "";
    private final Path arenaDir;
    private final FileChannel lockChannel;
    private final long staleArenasRemoved;
    private final ExecutorService maker;
    private ByteBuffer zeros; // maker thread only

    private final ReentrantLock lock = new ReentrantLock();
    // Guarded by lock.
    private final ArrayDeque<Request> waiting = new ArrayDeque<>();
    private final List<ShmSegment> free = new ArrayList<>(); // release order, oldest first
    private final Set<ShmSegment> segments = new HashSet<>(); // every mapped segment, in use or free
    private Request makingRoomFor;
    private long[] ownerInUse = new long[0];
    private long shareBytes = Long.MAX_VALUE;
    private long mappedBytes;
    private long inUseBytes;
    private long freeBytes;
    private long nextSegmentNumber;
    private long idleNanos = IDLE_NANOS_DEFAULT;
    /** Requests admitted so far (a segment given or being made for each). Guarded by the lock. */
    private long admissions;
    private long allocationWaits;
    private long waitNanos;
    private long segmentsCreated;
    private long segmentsReused;
    private long segmentsDeleted;
    /** Free segments deleted as a new, larger one was made in their stead ({@link #replacedLocked}); also in segmentsDeleted. */
    private long segmentsReplaced;
    private volatile boolean closed;

    private final AtomicLong nextObjectId = new AtomicLong(1);
    private final LongAdder objects = new LongAdder();
    private final LongAdder leases = new LongAdder();
    private final LongAdder allocations = new LongAdder();

    /** One allocation request, queued until the budget admits it. */
    private static final class Request {
        final long bytes;
        final long capacityBytes;
        final long enqueuedNanos;
        final int owner;
        final CompletableFuture<Allocation> future = new CompletableFuture<>();
        boolean admitted;
        boolean waited;

        Request(long bytes, long capacityBytes, long enqueuedNanos, int owner) {
            this.owner = owner;
            this.bytes = bytes;
            this.capacityBytes = capacityBytes;
            this.enqueuedNanos = enqueuedNanos;
        }
    }

    private ShmObjectStore(StoreConfig config, Path arenaDir, FileChannel lockChannel, long staleArenasRemoved) {
        this.config = config;
        this.budgetBytes = config.budgetBytes();
        this.arenaDir = arenaDir;
        this.lockChannel = lockChannel;
        this.staleArenasRemoved = staleArenasRemoved;
        this.maker = Executors.newSingleThreadExecutor(Thread.ofPlatform().daemon().name("stoker-store-maker").factory());
    }

    /**
     * Removes the arenas of dead processes under {@code config.directory()}, then creates and locks
     * this store's arena.
     */
    public static ShmObjectStore open(StoreConfig config) throws IOException {
        long stale = StaleArenas.remove(config.directory(), config.instanceName());
        for (int attempt = 0; attempt < ARENA_ATTEMPTS; attempt++) {
            String name = config.instanceName() + "-" + ProcessHandle.current().pid() + "-" + HexFormat.of().toHexDigits(RANDOM.nextInt());
            Path dir = config.directory().resolve(name);
            try {
                Files.createDirectory(dir, DIR_MODE);
            } catch (FileAlreadyExistsException e) {
                continue;
            } catch (IOException e) {
                throw new StoreException("cannot create the store's arena in " + config.directory() + ": " + reason(e), e);
            }
            Path lockFile = dir.resolve(LOCK_FILE);
            FileChannel channel = null;
            try {
                channel = FileChannel.open(lockFile, Set.of(CREATE_NEW, WRITE), FILE_MODE);
                FileLock held;
                try {
                    held = channel.tryLock();
                } catch (OverlappingFileLockException e) {
                    held = null; // another store of this JVM is cleaning it up as stale
                }
                if (held != null && Files.exists(lockFile, NOFOLLOW_LINKS)) {
                    return new ShmObjectStore(config, dir, channel, stale);
                }
            } catch (IOException | RuntimeException e) {
                closeQuietly(channel);
                deleteRecursively(dir);
                if (e instanceof IOException io) {
                    throw new StoreException("cannot create the store's arena in " + config.directory() + ": " + reason(io), io);
                }
                throw e;
            }
            // Lost a race with another store's stale-arena cleanup, which deletes this directory.
            closeQuietly(channel);
            deleteRecursively(dir);
        }
        throw new StoreException("cannot create the store's arena in " + config.directory() + " after " + ARENA_ATTEMPTS + " attempts");
    }

    /** This store's directory, {@code <directory>/<instanceName>-<pid>-<hex>}. */
    public Path arenaDir() { return arenaDir; }

    public long budgetBytes() { return budgetBytes; }

    public StoreConfig config() { return config; }

    /**
     * A writable object of exactly {@code bytes} bytes; the future completes when the budget admits
     * it (in arrival order among waiters). Never blocks the caller. Fails with a
     * {@link StoreException} at once when {@code bytes} exceeds the budget or the store is closed, and
     * later when a segment file cannot be created (e.g. the file system is full) or the store closes
     * while the request waits. Cancelling the future gives the space back.
     *
     * @throws IllegalArgumentException when {@code bytes} is negative
     */
    public CompletableFuture<Allocation> allocate(long bytes) { return allocate(bytes, NO_OWNER); }

    /** No owner: the request counts against the budget only. */
    public static final int NO_OWNER = -1;

    /**
     * Splits the budget into {@code owners} equal shares (owners 0 … owners−1, e.g. trainer ranks):
     * a request of an owner that already holds objects waits, without holding up anyone else's,
     * while its share could not take it. An owner that holds nothing may always be served (an object
     * larger than a share still gets made). So a consumer that stops reading pins at most its share
     * and the others keep theirs. 0 (the default) turns shares off.
     */
    public void shareAmong(int owners) {
        if (owners < 0) throw new IllegalArgumentException("owners must be >= 0, got " + owners);
        List<Runnable> completions = new ArrayList<>();
        lock.lock();
        try {
            long[] held = new long[owners];
            System.arraycopy(ownerInUse, 0, held, 0, Math.min(owners, ownerInUse.length));
            ownerInUse = held;
            shareBytes = owners == 0 ? Long.MAX_VALUE : budgetBytes / owners;
            dispatchLocked(completions);
        } finally {
            lock.unlock();
        }
        completions.forEach(Runnable::run);
    }

    /**
     * Raises the budget to {@code bytes} (a lower value leaves it as it is): a cluster member whose budget was not given
     * sizes its store for each job it is sent, from that job's largest batch. Shares ({@link #shareAmong}) grow with it,
     * and requests waiting for space are admitted where they now fit.
     */
    public void raiseBudget(long bytes) {
        List<Runnable> completions = new ArrayList<>();
        lock.lock();
        try {
            if (bytes <= budgetBytes) return;
            budgetBytes = bytes;
            if (shareBytes != Long.MAX_VALUE) shareBytes = budgetBytes / ownerInUse.length;
            dispatchLocked(completions);
        } finally {
            lock.unlock();
        }
        completions.forEach(Runnable::run);
    }

    /**
     * Records the largest object the store was sized for ({@code bytes}, {@code reason} saying whence, e.g. "the data's
     * largest batch, from its length index"), so that a writer can refuse, by name, a batch past it rather than wait on a
     * share it may never get ({@link #objectLimitBytes}). The store itself admits any object within its budget.
     */
    public void limitObjects(long bytes, String reason) {
        if (bytes < 1) throw new IllegalArgumentException("object limit must be positive, got " + bytes);
        objectLimitReason = java.util.Objects.requireNonNull(reason, "reason");
        objectLimitBytes = bytes;
    }

    /**
     * Keeps the segments' pages in memory within {@code bytes} where that costs no object in flight (issue 30's memory
     * item, {@code --shm-resident}): a segment whose object is released gives back its last pages
     * ({@code madvise(MADV_REMOVE)}) until the pages of all segments, in use and free, are within the limit again; a later
     * object that reuses it gets them filled and faulted in again on the maker thread, as a new segment would. Objects in
     * flight keep all of theirs, so the store may be over the limit while they are. Without a limit (the default) a free
     * segment keeps its pages for the next batch: first-touching a page costs more than writing it (75–740 MB/s against
     * 12.8 GB/s measured on the 2-core test VM), so the limit trades the store's memory for that time. Prepared segments
     * ({@link #prewarm}) stay within it too.
     */
    public void limitResident(long bytes) {
        if (bytes < 1) throw new IllegalArgumentException("resident limit must be positive, got " + bytes);
        residentLimitBytes = bytes;
    }

    /**
     * The segments' pages in memory: each segment's backed bytes, and the whole capacity of one being made or deleted
     * (counted in {@link #mappedBytes} but not in {@link #segments} then).
     */
    private long residentLocked() {
        long backed = 0, listed = 0;
        for (var s : segments) {
            backed += s.backedBytes;
            listed += s.capacityBytes;
        }
        return backed + Math.max(0, mappedBytes - listed);
    }

    /** The largest object the store was sized for ({@link #limitObjects}); Long.MAX_VALUE when none was set. */
    public long objectLimitBytes() { return objectLimitBytes; }

    /** Whence {@link #objectLimitBytes} came, in words ("" when none was set). */
    public String objectLimitReason() { return objectLimitReason; }

    /**
     * {@link #allocate(long)} counted against {@code owner}'s share ({@link #shareAmong}); an owner
     * outside the shares, or {@link #NO_OWNER}, counts against the budget only.
     */
    public CompletableFuture<Allocation> allocate(long bytes, int owner) {
        if (bytes < 0) throw new IllegalArgumentException("object size must not be negative, got " + bytes);
        if (bytes > budgetBytes) {
            return CompletableFuture.failedFuture(new StoreException(
                    "object of " + bytes + " bytes exceeds the store budget of " + budgetBytes + " bytes (--shm-budget)"));
        }
        Request request = new Request(bytes, Math.min(sizeClass(bytes), budgetBytes), System.nanoTime(), owner);
        List<Runnable> completions = new ArrayList<>(1);
        lock.lock();
        try {
            if (closed) return CompletableFuture.failedFuture(closedException());
            waiting.addLast(request);
            dispatchLocked(completions);
            if (!request.admitted) {
                request.waited = true;
                allocationWaits++;
            }
        } finally {
            lock.unlock();
        }
        completions.forEach(Runnable::run);
        return request.future;
    }

    /**
     * Creates up to {@code count} segments able to hold an object of {@code bytes}, and leaves them
     * free, so that the first objects written do not pay for fresh pages (first-touching memory is
     * slow on some machines: 75–300 MB/s measured on the 2-core test VM). Takes at most half the
     * budget and no more than the resident limit ({@link #limitResident}), never waits for space, and returns how many
     * segments were made ready.
     */
    public int prewarm(long bytes, int count) throws IOException {
        if (bytes <= 0 || count <= 0) return 0;
        long size = Math.min(sizeClass(bytes), budgetBytes);
        int n = (int) Math.min(Math.min(count, (budgetBytes / 2) / size), residentLimitBytes / size);
        var held = new ArrayList<Allocation>(n);
        try {
            for (int i = 0; i < n; i++) held.add(allocate(bytes).get(CLOSE_WAIT_SECONDS * 4, TimeUnit.SECONDS));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new java.io.InterruptedIOException("interrupted while preparing segments");
        } catch (java.util.concurrent.ExecutionException e) {
            throw e.getCause() instanceof IOException io ? io : new IOException(e.getCause());
        } catch (java.util.concurrent.TimeoutException e) {
            throw new IOException("preparing " + n + " segments of " + size + " bytes took over " + CLOSE_WAIT_SECONDS * 4 + " s", e);
        } finally {
            held.forEach(Allocation::abort);
        }
        return n;
    }

    /** A consistent snapshot of the accounting and counters. */
    public StoreMetrics metrics() {
        lock.lock();
        try {
            return new StoreMetrics(budgetBytes, mappedBytes, inUseBytes, objects.sum(), leases.sum(), allocations.sum(),
                    allocationWaits, waitNanos, segmentsCreated, segmentsReused, segmentsDeleted, staleArenasRemoved, segmentsReplaced,
                    residentLocked(), residentLimitBytes == Long.MAX_VALUE ? 0 : residentLimitBytes, returnedBytes);
        } finally {
            lock.unlock();
        }
    }

    /**
     * Fails the waiting allocations ({@link StoreException} "store closed"), waits for the maker
     * thread, unmaps and deletes every segment file and the arena directory, and drops the arena
     * lock. Objects still referenced lose their memory: later access through their views throws
     * {@link IllegalStateException}. Idempotent.
     */
    @Override
    public void close() {
        List<Request> pending;
        List<ShmSegment> all;
        lock.lock();
        try {
            if (closed) return;
            closed = true;
            pending = new ArrayList<>(waiting);
            waiting.clear();
            all = new ArrayList<>(segments);
            segments.clear();
            free.clear();
            freeBytes = 0;
        } finally {
            lock.unlock();
        }
        for (Request r : pending) r.future.completeExceptionally(closedException());
        maker.shutdown(); // a creation in progress notices `closed`, deletes its file and fails its request
        try {
            if (!maker.awaitTermination(CLOSE_WAIT_SECONDS, TimeUnit.SECONDS)) {
                LOG.log(System.Logger.Level.WARNING, "segment maker of " + arenaDir + " did not stop within " + CLOSE_WAIT_SECONDS + " s");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        for (ShmSegment s : all) s.unmapAndDelete();
        deleteRecursively(arenaDir); // while still locked, so that no other store takes it for stale
        closeQuietly(lockChannel);
        lock.lock();
        try {
            mappedBytes = 0;
            inUseBytes = 0;
        } finally {
            lock.unlock();
        }
    }

    boolean isClosed() { return closed; }

    // ---- called by Allocation, StoredObject and leases ----

    StoredObject sealed(ShmSegment shm, long bytes) {
        objects.increment();
        return new StoredObject(this, shm, nextObjectId.getAndIncrement(), bytes);
    }

    /** The segment's object was aborted or dropped its last reference: back to the free pool. */
    void recycle(ShmSegment shm, boolean wasObject) {
        if (wasObject) objects.decrement();
        // over the resident limit: this segment gives back its last pages before anyone can take it again (limitResident);
        // without a limit (the default) a release takes the lock once, as before
        long limit = residentLimitBytes;
        if (limit != Long.MAX_VALUE) {
            long keep = -1, had = 0;
            lock.lock();
            try {
                if (closed) return; // close() has unmapped and deleted it
                long over = residentLocked() - limit;
                if (over > 0 && shm.backedBytes > 0) {
                    had = shm.backedBytes;
                    keep = Math.max(0, had - over) / PAGE_BYTES * PAGE_BYTES;
                    shm.backedBytes = keep;
                    returnedBytes += had - keep;
                }
            } finally {
                lock.unlock();
            }
            if (keep >= 0) trim(shm, keep, had); // neither free nor lent meanwhile: no one writes it
        }
        List<Runnable> completions = new ArrayList<>(1);
        lock.lock();
        try {
            if (closed) return; // close() has unmapped and deleted it
            inUseBytes -= shm.capacityBytes;
            countOwnerLocked(shm.owner, -shm.capacityBytes);
            shm.owner = -1;
            shm.releasedNanos = System.nanoTime();
            shm.releasedAtAdmission = admissions;
            free.add(shm);
            freeBytes += shm.capacityBytes;
            dispatchLocked(completions);
            dropIdleLocked(shm.releasedNanos);
        } finally {
            lock.unlock();
        }
        completions.forEach(Runnable::run);
    }

    /** Tests: how long a free segment may stay unused before it is deleted. */
    void idleAfter(long nanos) {
        lock.lock();
        try {
            idleNanos = nanos;
        } finally {
            lock.unlock();
        }
    }

    /** How many admitted requests may pass a free segment over before it goes: {@link #PASSED_OVER_PER_SHARE} per share. */
    private long passedOverLimitLocked() {
        return keepsPagesLocked() ? Long.MAX_VALUE : (long) PASSED_OVER_PER_SHARE * Math.max(1, ownerInUse.length);
    }

    /**
     * Whether the store keeps its pages for speed: no resident limit ({@link #limitResident}) was set. A reused segment then
     * keeps all of its pages, a new segment replaces no free one ({@link #replacedLocked}) and no free segment goes for
     * being passed over — each of those makes a later, larger batch fault in fresh pages on the maker thread (measured on
     * the 2-core test VM, the cache restart of docs/benchmarks.md: 13–17 segments made in a 75-batch epoch with them,
     * 10–11 without); only the idle rule remains. With a limit, the store trades those pages for memory.
     */
    private boolean keepsPagesLocked() { return residentLimitBytes == Long.MAX_VALUE; }

    /**
     * Deletes the free segments no request took for {@link #IDLE_NANOS_DEFAULT} (released before {@code now} minus that), or
     * that {@link #PASSED_OVER_PER_SHARE} requests per share passed over since they came back (a segment made for a burst or
     * for a batch larger than the rest, which the objects in flight do not turn over: measured, 587 MB of 1.1 GB mapped in a
     * 1-rank job whose trainer was the slower side, issue 30's memory item), on the
     * maker thread; their bytes stay counted until their files are gone. Checked whenever a segment comes back, so a store
     * that nobody uses keeps what it has, and one in use keeps what its objects in flight turn over: a segment left over
     * from a burst (a larger batch, a deeper buffer at start) no longer stays resident for the whole job.
     */
    private void dropIdleLocked(long now) {
        List<ShmSegment> idle = null;
        for (var it = free.iterator(); it.hasNext(); ) {
            ShmSegment s = it.next();
            // release order: the rest are younger, in time and in admissions
            if (now - s.releasedNanos < idleNanos && admissions - s.releasedAtAdmission < passedOverLimitLocked()) break;
            it.remove();
            freeBytes -= s.capacityBytes;
            segments.remove(s);
            (idle == null ? idle = new ArrayList<>() : idle).add(s);
        }
        if (idle == null) return;
        List<ShmSegment> victims = idle;
        maker.execute(() -> deleteFree(victims));
    }

    void leaseOpened() { leases.increment(); }

    void leaseClosed() { leases.decrement(); }

    // ---- admission ----

    /**
     * Serves waiting requests from the head of the queue while the budget admits them; adds the
     * future completions to run after the lock is released; hands file work to the maker thread.
     */
    private void dispatchLocked(List<Runnable> completions) {
        var it = waiting.iterator();
        while (makingRoomFor == null && it.hasNext()) {
            Request r = it.next();
            if (r.future.isDone()) { // cancelled by the caller while waiting
                it.remove();
                continue;
            }
            if (overShareLocked(r)) continue; // waits for its owner's own releases; holds no one else up
            // a free segment up to REUSE_FACTOR times larger beats a new one: a new one costs fresh pages
            long maxReuseBytes = r.capacityBytes > Long.MAX_VALUE / REUSE_FACTOR ? Long.MAX_VALUE : REUSE_FACTOR * r.capacityBytes;
            ShmSegment larger = smallestFreeLocked(r.bytes, maxReuseBytes);
            ShmSegment fit = larger != null && overShareLocked(r.owner, larger.capacityBytes) ? null : larger; // not over its share
            if (fit != null) {
                admitLocked(it, r, fit.capacityBytes); // the owner is charged the segment it gets, as recycle refunds it
                free.remove(fit);
                freeBytes -= fit.capacityBytes;
                inUseBytes += fit.capacityBytes;
                fit.owner = r.owner;
                segmentsReused++;
                long backed = fit.backedBytes, wanted = r.capacityBytes;
                if (backed < wanted) { // pages given back earlier: filled again on the maker thread, then handed out
                    fit.backedBytes = wanted;
                    maker.execute(() -> reback(r, fit, backed, wanted));
                } else {
                    if (!keepsPagesLocked() && backed > wanted + (long) (TRIM_SLACK * wanted)) fit.backedBytes = wanted;
                    long keep = fit.backedBytes;
                    completions.add(() -> {
                        if (keep < backed) trim(fit, keep, backed);
                        deliver(r, fit);
                    });
                }
            } else if (budgetBytes - mappedBytes >= r.capacityBytes) {
                admitLocked(it, r, r.capacityBytes);
                mappedBytes += r.capacityBytes;
                inUseBytes += r.capacityBytes;
                long number = nextSegmentNumber++;
                ShmSegment replaced = replacedLocked(r);
                if (replaced == null) {
                    maker.execute(() -> make(r, number, List.of()));
                } else {
                    maker.execute(() -> {
                        deleteFree(List.of(replaced));
                        make(r, number, List.of());
                    });
                }
            } else if (budgetBytes - (mappedBytes - freeBytes) >= r.capacityBytes) {
                admitLocked(it, r, r.capacityBytes);
                List<ShmSegment> victims = takeVictimsLocked(r.capacityBytes - (budgetBytes - mappedBytes));
                makingRoomFor = r;
                long number = nextSegmentNumber++;
                maker.execute(() -> make(r, number, victims));
            } else {
                return; // waits for a release; later requests within their shares do not overtake it
            }
        }
    }

    /** Whether {@code r}'s owner already holds objects and its share cannot take {@code r} as well. */
    private boolean overShareLocked(Request r) { return overShareLocked(r.owner, r.capacityBytes); }

    private boolean overShareLocked(int owner, long capacityBytes) {
        if (owner < 0 || owner >= ownerInUse.length) return false;
        long held = ownerInUse[owner];
        return held > 0 && held + capacityBytes > shareBytes;
    }

    private void admitLocked(java.util.Iterator<Request> it, Request r, long chargedBytes) {
        it.remove();
        r.admitted = true;
        admissions++;
        if (r.waited) waitNanos += System.nanoTime() - r.enqueuedNanos;
        countOwnerLocked(r.owner, chargedBytes);
    }

    /**
     * Charges (or refunds, negative) an owner's share: the same bytes both ways (the segment's
     * capacity), so a count never goes below 0. A refund of what was charged before the shares were
     * set ({@link #shareAmong} while objects are held) stops at 0.
     */
    private void countOwnerLocked(int owner, long bytes) {
        if (owner < 0 || owner >= ownerInUse.length) return;
        ownerInUse[owner] = Math.max(0, ownerInUse[owner] + bytes);
    }

    /** Bytes of segments {@code owner} holds now, as its share counts them. */
    long ownerHeldBytes(int owner) {
        lock.lock();
        try {
            return owner >= 0 && owner < ownerInUse.length ? ownerInUse[owner] : 0;
        } finally {
            lock.unlock();
        }
    }

    private ShmSegment smallestFreeLocked(long minBytes, long maxBytes) {
        ShmSegment best = null;
        for (ShmSegment s : free) {
            if (s.capacityBytes >= minBytes && s.capacityBytes <= maxBytes && (best == null || s.capacityBytes < best.capacityBytes)) {
                best = s;
            }
        }
        return best;
    }

    /**
     * The free segment a new segment for {@code r} stands in for, taken out of the free pool (null: none): the largest one
     * too small for {@code r} whose requests the new one can serve as well (within {@link #REUSE_FACTOR}). A store thus
     * keeps about as many segments as it has objects in flight, each grown to the largest batch it met, rather than one
     * more per larger batch — segments of the smaller sizes otherwise stayed free beside them until the idle or passed-over
     * rule deleted them (measured: 10 segments for 5 objects in flight, 587 MB of 1.1 GB free, in a 1-rank job of one to
     * three images per sample; issue 30's memory item). The new segment's pages past the object are not resident until an
     * object needs them (it is made for this one's size class).
     */
    private ShmSegment replacedLocked(Request r) {
        if (keepsPagesLocked()) return null;
        ShmSegment best = null;
        for (ShmSegment s : free)
            if (s.capacityBytes < r.bytes && s.capacityBytes * REUSE_FACTOR >= r.capacityBytes
                    && (best == null || s.capacityBytes > best.capacityBytes)) best = s;
        if (best == null) return null;
        free.remove(best);
        freeBytes -= best.capacityBytes;
        segments.remove(best);
        segmentsReplaced++;
        return best;
    }

    /** Deletes free segments already taken out of the pool, on the maker thread; their bytes count until their files are gone. */
    private void deleteFree(List<ShmSegment> victims) {
        long bytes = 0;
        for (ShmSegment v : victims) {
            v.unmapAndDelete();
            bytes += v.capacityBytes;
        }
        List<Runnable> completions = new ArrayList<>();
        lock.lock();
        try {
            mappedBytes -= bytes;
            segmentsDeleted += victims.size();
            if (!closed) dispatchLocked(completions);
        } finally {
            lock.unlock();
        }
        completions.forEach(Runnable::run);
    }

    /** Removes free segments, least recently released first, until {@code neededBytes} are covered. */
    private List<ShmSegment> takeVictimsLocked(long neededBytes) {
        List<ShmSegment> victims = new ArrayList<>();
        long taken = 0;
        while (taken < neededBytes) {
            ShmSegment v = free.removeFirst();
            freeBytes -= v.capacityBytes;
            segments.remove(v);
            victims.add(v);
            taken += v.capacityBytes;
        }
        return victims;
    }

    // ---- the maker thread ----

    /** Deletes {@code victims} (if any), then creates segment {@code number} for {@code r}. */
    private void make(Request r, long number, List<ShmSegment> victims) {
        if (!victims.isEmpty()) {
            long deletedBytes = 0;
            for (ShmSegment v : victims) {
                v.unmapAndDelete();
                deletedBytes += v.capacityBytes;
            }
            List<Runnable> completions = new ArrayList<>();
            boolean wasClosed;
            lock.lock();
            try {
                mappedBytes -= deletedBytes;
                segmentsDeleted += victims.size();
                makingRoomFor = null;
                wasClosed = closed;
                if (!wasClosed) {
                    mappedBytes += r.capacityBytes;
                    inUseBytes += r.capacityBytes;
                    dispatchLocked(completions);
                }
            } finally {
                lock.unlock();
            }
            completions.forEach(Runnable::run);
            if (wasClosed) {
                r.future.completeExceptionally(closedException());
                return;
            }
        }
        Path file = arenaDir.resolve(SEGMENT_PREFIX + number);
        ShmSegment shm;
        try {
            shm = createSegment(number, file, r.capacityBytes);
        } catch (IOException | RuntimeException e) {
            try {
                Files.deleteIfExists(file);
            } catch (IOException suppressed) {
                e.addSuppressed(suppressed);
            }
            List<Runnable> completions = new ArrayList<>();
            boolean wasClosed;
            lock.lock();
            try {
                mappedBytes -= r.capacityBytes;
                inUseBytes -= r.capacityBytes;
                countOwnerLocked(r.owner, -r.capacityBytes);
                wasClosed = closed;
                if (!wasClosed) dispatchLocked(completions);
            } finally {
                lock.unlock();
            }
            completions.forEach(Runnable::run);
            r.future.completeExceptionally(wasClosed ? closedException() : new StoreException(
                    "cannot create a " + r.capacityBytes + "-byte segment in " + config.directory() + ": " + reason(e), e));
            return;
        }
        boolean wasClosed;
        lock.lock();
        try {
            wasClosed = closed;
            if (!wasClosed) {
                segments.add(shm);
                shm.owner = r.owner;
                segmentsCreated++;
            }
        } finally {
            lock.unlock();
        }
        if (wasClosed) {
            shm.unmapAndDelete();
            r.future.completeExceptionally(closedException());
            return;
        }
        // Not on this thread: a dependent stage that waited for another new segment would deadlock it.
        Thread.ofVirtual().name("stoker-store-deliver").start(() -> deliver(r, shm));
    }

    /**
     * Creates the file (mode 0600), writes zeros through the channel so that tmpfs allocates every
     * page now (a full file system fails here, not with SIGBUS on a later write through the
     * mapping), then maps it read-write in a shared arena of its own.
     */
    private ShmSegment createSegment(long number, Path file, long capacityBytes) throws IOException {
        try (FileChannel channel = FileChannel.open(file, Set.of(CREATE_NEW, READ, WRITE), FILE_MODE)) {
            if (zeros == null) zeros = ByteBuffer.allocateDirect(ZERO_CHUNK_BYTES);
            long position = 0;
            while (position < capacityBytes) {
                if (closed) throw new StoreException("store closed");
                zeros.clear().limit((int) Math.min(ZERO_CHUNK_BYTES, capacityBytes - position));
                while (zeros.hasRemaining()) position += channel.write(zeros, position);
            }
            Arena arena = Arena.ofShared();
            try {
                MemorySegment mapping = channel.map(MapMode.READ_WRITE, 0, capacityBytes, arena);
                // Fault every page of the mapping in now, writable. The zero-fill above allocated the pages but
                // not this process's page-table entries: without this, the CPU stage's first write to each 4 KiB
                // page of a new segment takes a page fault (measured: over half the CPU time of the first batches
                // on the test VM went to faults inside the copy of pixel rows into the segment).
                for (long offset = 0; offset < capacityBytes; offset += PAGE_BYTES) mapping.set(ValueLayout.JAVA_BYTE, offset, (byte) 0);
                return new ShmSegment(number, file, capacityBytes, arena, mapping);
            } catch (IOException | RuntimeException e) {
                arena.close();
                throw e;
            }
        }
    }

    /** Gives the pages of {@code shm} in [{@code from}, {@code to}) back to the kernel: a hole in the tmpfs file (free segments only). */
    private static void trim(ShmSegment shm, long from, long to) {
        try {
            int rc = (int) MADVISE.invokeExact(shm.mapping.asSlice(from, to - from), to - from, MADV_REMOVE);
            if (rc != 0) LOG.log(System.Logger.Level.DEBUG, "madvise(MADV_REMOVE) on " + shm + " failed; its pages stay");
        } catch (IllegalStateException e) {
            // closed meanwhile: nothing to give back
        } catch (Throwable e) {
            LOG.log(System.Logger.Level.WARNING, "madvise(MADV_REMOVE) on " + shm + ": " + e);
        }
    }

    /**
     * Maker thread: fills [{@code from}, {@code to}) of a reused segment whose pages there were given back, through its file
     * (tmpfs allocates them now: a full file system fails the request here, not with SIGBUS later), faults them in, then
     * hands the segment to {@code r} on a virtual thread; on failure the segment goes back to the free pool as it was.
     */
    private void reback(Request r, ShmSegment shm, long from, long to) {
        try (FileChannel channel = FileChannel.open(shm.file, WRITE)) {
            if (zeros == null) zeros = ByteBuffer.allocateDirect(ZERO_CHUNK_BYTES);
            long position = from;
            while (position < to) {
                if (closed) throw new StoreException("store closed");
                zeros.clear().limit((int) Math.min(ZERO_CHUNK_BYTES, to - position));
                while (zeros.hasRemaining()) position += channel.write(zeros, position);
            }
            for (long offset = from; offset < to; offset += PAGE_BYTES) shm.mapping.set(ValueLayout.JAVA_BYTE, offset, (byte) 0);
        } catch (IOException | RuntimeException e) {
            trim(shm, from, to); // whatever part was filled
            lock.lock();
            try {
                shm.backedBytes = from;
            } finally {
                lock.unlock();
            }
            recycle(shm, false);
            r.future.completeExceptionally(closed ? closedException() : new StoreException(
                    "cannot fill " + (to - from) + " bytes of a reused segment in " + config.directory() + ": " + reason(e), e));
            return;
        }
        Thread.ofVirtual().name("stoker-store-deliver").start(() -> deliver(r, shm));
    }

    private void deliver(Request r, ShmSegment shm) {
        if (closed) { // close() unmapped the segment
            r.future.completeExceptionally(closedException());
            return;
        }
        Allocation a = new Allocation(this, shm, r.bytes);
        // counted before the caller can see it: a caller that reads the metrics once its allocation is done must find it
        // counted (CI stop 38's StoreStressTest read 899 of 900, the last increment still after the completion)
        allocations.increment();
        if (!r.future.complete(a)) {
            allocations.decrement();
            a.abort(); // the caller cancelled the future meanwhile
        }
    }

    // ---- helpers ----

    /**
     * The capacity of the segment that holds an object of {@code bytes}: whole MiB up to 8 MiB, then
     * 8 classes per power of two (steps of 1/8 of the lower power of two). What a share is charged
     * for the object, at the least.
     */
    public static long sizeClass(long bytes) {
        if (bytes <= 8 * MIB) return Math.max(1, Math.ceilDiv(bytes, MIB)) * MIB;
        long step = Long.highestOneBit(bytes - 1) >>> 3;
        long steps = Math.ceilDiv(bytes, step);
        return steps > Long.MAX_VALUE / step ? bytes : steps * step;
    }

    private static StoreException closedException() {
        return new StoreException("store closed");
    }

    /** The OS's words for an I/O failure ("No space left on device"), without the file name. */
    static String reason(Throwable e) {
        if (e instanceof FileSystemException fse && fse.getReason() != null) return fse.getReason();
        if (e.getMessage() != null) return e.getMessage();
        return e.getClass().getSimpleName();
    }

    /** Deletes {@code dir} and what is inside it, without following links; true when it is gone. */
    private static boolean deleteRecursively(Path dir) {
        try {
            Files.walkFileTree(dir, new SimpleFileVisitor<>() {
                @Override
                public FileVisitResult visitFile(Path file, BasicFileAttributes attrs) throws IOException {
                    Files.deleteIfExists(file);
                    return FileVisitResult.CONTINUE;
                }

                @Override
                public FileVisitResult visitFileFailed(Path file, IOException e) throws IOException {
                    if (e instanceof NoSuchFileException) return FileVisitResult.CONTINUE;
                    throw e;
                }

                @Override
                public FileVisitResult postVisitDirectory(Path d, IOException e) throws IOException {
                    if (e != null && !(e instanceof NoSuchFileException)) throw e;
                    Files.deleteIfExists(d);
                    return FileVisitResult.CONTINUE;
                }
            });
            return true;
        } catch (NoSuchFileException e) {
            return true;
        } catch (IOException e) {
            LOG.log(System.Logger.Level.WARNING, "cannot delete " + dir, e);
            return false;
        }
    }

    private static void closeQuietly(FileChannel channel) {
        if (channel == null) return;
        try {
            channel.close();
        } catch (IOException e) {
            LOG.log(System.Logger.Level.DEBUG, "closing a lock file failed", e);
        }
    }

    @Override
    public String toString() {
        return "ShmObjectStore[" + arenaDir + ", budget " + budgetBytes + " bytes]";
    }
}
