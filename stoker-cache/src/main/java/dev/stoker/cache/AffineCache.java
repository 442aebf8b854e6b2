package dev.stoker.cache;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.LinkedHashMap;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;

/**
 * A cluster node's cache of preprocessed media with affinity: each entry has a home member ({@link CacheHomes}, by its
 * key), and the entry lives in its home's {@link SampleCache}, whichever node makes the batch or pack the sample falls
 * in. So in epoch two every node finds every entry, where with a cache per node a sample made on a random one of N
 * nodes found its entry there about 1/N of the time.
 *
 * <p>Reads: an entry this node holds (or is the home of) is read locally; else it is asked of its home
 * ({@link Peers#fetch}: exact length, bounded in time). A miss at the home is a miss: the caller computes the entry and
 * {@link #write}s it, which keeps the bytes in a bounded outbox and offers them to the home ({@link Peers#offer}); the home
 * takes them ({@link #take}: fetches them from this node's outbox on a thread of its own) and stores them. Entries homed
 * here are written locally. A home that fails or does not answer in time is a <em>fallback</em>: the caller computes the
 * entry itself (counted; never a hang, never another entry's bytes), and the home is <em>down</em>: not asked by readers or
 * writers until a probe on a thread of this cache's own ({@link Peers#reach}, every {@link #PROBE_NANOS}, the first after
 * {@link #MIN_DOWN_NANOS}) is answered, or the homes change. The shortest down period doubles with each failure not
 * followed by an answered fetch or offer (a home that answers probes but not fetches), up to {@link #MAX_DOWN_NANOS}. So a
 * slow moment costs a second of fallbacks, not ten, and a reader's thread waits on a hung home once per down period at
 * most. When the homes are named the channels to them are opened ahead ({@link Peers#reach} with the peer's first-call
 * deadline, on the probe threads), so that the first read of a job does not open one. What this node serves its peers
 * comes from its cache or its outbox ({@link #serve}).
 *
 * <p>Threading: every method may be called from any thread; the homes are replaced whole ({@link #homes(CacheHomes)}).
 */
public final class AffineCache implements CacheEntries, AutoCloseable {
    /** The shortest time a home that failed is not asked (its entries are computed and stored locally meanwhile). */
    static final long MIN_DOWN_NANOS = TimeUnit.SECONDS.toNanos(1);
    /** The longest shortest-down period, reached after failures in a row (1, 2, 4 … 64 s, capped here). */
    static final long MAX_DOWN_NANOS = TimeUnit.SECONDS.toNanos(60);
    /** How often a home that is down is probed once its shortest down period has passed. */
    static final long PROBE_NANOS = TimeUnit.SECONDS.toNanos(1);
    /** The longest entry fetched from or served to a peer (a long video's frames). */
    public static final long MAX_ENTRY_BYTES = 1L << 30;
    /** Entries the home takes at once from its peers' offers; more are dropped (counted). */
    static final int TAKE_QUEUE = 256;
    /** Longest an entry waits in the outbox for its home to take it (a home that accepted and then failed). */
    static final long OUTBOX_TTL_NANOS = TimeUnit.SECONDS.toNanos(60);

    /** How this node reaches its peers' caches. */
    public interface Peers {
        /**
         * Reads entry {@code key} from member {@code member}'s cache (or outbox) into {@code dst}, exactly its length: true
         * on a hit, false on a miss. Throws when the member cannot be asked, fails, sends another length or does not
         * answer within the peer's deadline.
         */
        boolean fetch(CacheHomes.Member member, CacheKey key, MemorySegment dst) throws Exception;

        /**
         * Tells {@code home} that this node holds entry {@code key} of {@code lengthBytes} bytes for it to take: true when
         * the home will take it, false when it will not (it holds it, or by its homes it is not the entry's home).
         */
        boolean offer(CacheHomes.Member home, CacheKey key, long lengthBytes) throws Exception;

        /**
         * One cheap call to {@code member}, opening the channel to it when none is open: returns when it answered; throws
         * when it cannot be reached or does not answer within the peer's deadline ({@code first}: the longer one of a
         * channel's first call, a TLS handshake to a member that is busy opening the job). Called on the cache's own probe
         * threads, never a reader's. The default: nothing to open, always answered.
         */
        default void reach(CacheHomes.Member member, boolean first) throws Exception {}
    }

    /**
     * What affinity did on this node: media entries read locally (hits and misses), asked of their home (hits, misses),
     * fallbacks (the home failed or timed out: computed here), bytes fetched from homes; entries offered to their homes (and
     * accepted by them) and dropped from the outbox before the home took them (over its bytes or its time); entries this node took as home (and their bytes), offers it did
     * not take, and entries it served to peers (and their bytes).
     */
    public record Stats(long localHits, long localMisses, long remoteHits, long remoteMisses, long fallbacks, long fetchedBytes,
                        long offered, long outboxDropped, long taken, long takenBytes, long takeDropped, long served, long servedBytes) {
        /** Hits (local and remote) over media reads. */
        public double hitRate() {
            long reads = localHits + localMisses + remoteHits + remoteMisses + fallbacks;
            return reads == 0 ? 0 : (double) (localHits + remoteHits) / reads;
        }
    }

    private final SampleCache local;
    private final Peers peers;
    private final long outboxLimitBytes;
    private volatile CacheHomes homes;
    /** Homes down now (by member name), each with its shortest down period. */
    private final ConcurrentHashMap<String, Long> down = new ConcurrentHashMap<>();
    /** Failures of a home (by member name) since its last answered fetch or offer. */
    private final ConcurrentHashMap<String, Integer> strikes = new ConcurrentHashMap<>();
    /** Opens the channels to the homes ahead and probes the homes that are down. */
    private final java.util.concurrent.ScheduledThreadPoolExecutor probes;
    /** Bumped when the homes change: probes of earlier homes stop. */
    private final java.util.concurrent.atomic.AtomicLong generation = new java.util.concurrent.atomic.AtomicLong();
    /** An entry kept for its home, since {@code atNanos}. */
    private record Held(byte[] bytes, long atNanos) {}

    private final LinkedHashMap<CacheKey, Held> outbox = new LinkedHashMap<>();
    private long outboxBytes;
    private final ThreadPoolExecutor takers;
    private final LongAdder localHits = new LongAdder(), localMisses = new LongAdder(), remoteHits = new LongAdder(),
            remoteMisses = new LongAdder(), fallbacks = new LongAdder(), fetchedBytes = new LongAdder(), offered = new LongAdder(),
            outboxDropped = new LongAdder(), taken = new LongAdder(), takenBytes = new LongAdder(), takeDropped = new LongAdder(),
            served = new LongAdder(), servedBytes = new LongAdder();

    /**
     * @param local            this node's cache
     * @param peers            how to reach the other members
     * @param outboxLimitBytes the most bytes kept for homes to take (the oldest go first; an entry larger than a quarter of it
     *                         is stored locally instead)
     */
    public AffineCache(SampleCache local, Peers peers, long outboxLimitBytes) {
        this.local = java.util.Objects.requireNonNull(local, "local");
        this.peers = java.util.Objects.requireNonNull(peers, "peers");
        if (outboxLimitBytes <= 0) throw new IllegalArgumentException("outbox limit must be positive, got " + outboxLimitBytes);
        this.outboxLimitBytes = outboxLimitBytes;
        this.takers = new ThreadPoolExecutor(2, 2, 30, TimeUnit.SECONDS, new ArrayBlockingQueue<>(TAKE_QUEUE), r -> {
            var t = new Thread(r, "stoker-cache-take");
            t.setDaemon(true);
            return t;
        });
        takers.allowCoreThreadTimeOut(true);
        this.probes = new java.util.concurrent.ScheduledThreadPoolExecutor(2, r -> {
            var t = new Thread(r, "stoker-cache-probe");
            t.setDaemon(true);
            return t;
        });
        probes.setRemoveOnCancelPolicy(true);
    }

    /** This node's own cache. */
    public SampleCache local() { return local; }

    /**
     * The homes from now on (null: every entry local); homes that failed are asked again. The channels to the other homes
     * are opened ahead, on the probe threads; one that cannot be reached is down until a probe answers.
     */
    public void homes(CacheHomes h) {
        long g = generation.incrementAndGet();
        homes = h;
        down.clear();
        strikes.clear();
        if (h == null) return;
        for (var m : h.members()) {
            if (m.name().equals(h.self())) continue;
            try {
                probes.execute(() -> {
                    if (generation.get() != g) return;
                    try {
                        peers.reach(m, true);
                    } catch (Exception e) {
                        if (generation.get() == g) markDown(m);
                    }
                });
            } catch (java.util.concurrent.RejectedExecutionException closed) {
                return;
            }
        }
    }

    /** The homes down now (member names): not asked until a probe answers. */
    public java.util.Set<String> downHomes() { return java.util.Set.copyOf(down.keySet()); }

    /** Home {@code name}'s shortest down period now (0 when it is up). */
    long downNanos(String name) { return down.getOrDefault(name, 0L); }

    public CacheHomes homes() { return homes; }

    @Override
    public boolean read(CacheKey key, MemorySegment dst) {
        boolean held = local.holds(key);
        if (held && local.read(key, dst)) {
            localHits.increment();
            return true;
        }
        var h = homes;
        var home = h == null ? null : h.home(key);
        if (home == null || home.name().equals(h.self())) {
            if (!held && local.read(key, dst)) { // another service of this host may have written it
                localHits.increment();
                return true;
            }
            localMisses.increment();
            return false;
        }
        if (down(home)) {
            fallbacks.increment();
            return false;
        }
        try {
            boolean hit = peers.fetch(home, key, dst);
            strikes.remove(home.name());
            if (hit) {
                remoteHits.increment();
                fetchedBytes.add(dst.byteSize());
                return true;
            }
            remoteMisses.increment();
            return false;
        } catch (Exception e) {
            markDown(home);
            fallbacks.increment();
            return false;
        }
    }

    @Override
    public boolean write(CacheKey key, MemorySegment raw) {
        var h = homes;
        var home = h == null ? null : h.home(key);
        long n = raw.byteSize();
        if (home == null || home.name().equals(h.self()) || down(home) || n > outboxLimitBytes / 4) return local.write(key, raw);
        byte[] copy = raw.toArray(ValueLayout.JAVA_BYTE);
        long now = System.nanoTime();
        synchronized (outbox) {
            var old = outbox.remove(key); // written again: to the end, as the newest
            if (old != null) outboxBytes -= old.bytes().length;
            outbox.put(key, new Held(copy, now));
            outboxBytes += n;
            var it = outbox.entrySet().iterator(); // oldest first: over the bytes, or waiting too long
            while (it.hasNext()) {
                var e = it.next();
                if (e.getKey().equals(key) || (outboxBytes <= outboxLimitBytes && now - e.getValue().atNanos() < OUTBOX_TTL_NANOS)) break;
                outboxBytes -= e.getValue().bytes().length;
                it.remove();
                outboxDropped.increment();
            }
        }
        try {
            boolean taking = peers.offer(home, key, n);
            strikes.remove(home.name());
            if (taking) {
                offered.increment();
                return true;
            }
            fromOutbox(key); // the home holds it already, or by its homes another node is home: nothing to keep here
            return false;
        } catch (Exception e) {
            markDown(home);
            fromOutbox(key);
            return local.write(key, raw);
        }
    }

    /**
     * Whether this node may have entry {@code key} to serve (its outbox or its cache's listing): a peer's request for
     * another is answered as a miss before any buffer is set aside for it.
     */
    public boolean holds(CacheKey key) {
        synchronized (outbox) {
            if (outbox.containsKey(key)) return true;
        }
        return local.holds(key);
    }

    /**
     * A peer asks for entry {@code key} into {@code dst} (exactly its length): from this node's outbox (taken out: its home
     * took it) or its cache. False when neither has it at that length.
     */
    public boolean serve(CacheKey key, MemorySegment dst) {
        byte[] o = fromOutbox(key);
        if (o != null && o.length == dst.byteSize()) {
            MemorySegment.copy(MemorySegment.ofArray(o), 0, dst, 0, o.length);
        } else if (!local.read(key, dst)) {
            return false;
        }
        served.increment();
        servedBytes.add(dst.byteSize());
        return true;
    }

    /**
     * Member {@code from} offers entry {@code key} ({@code lengthBytes}) homed here: fetched from it on a taker thread and
     * stored. Ignored (false) when {@code from} is no member, the entry is not homed here, is held already, or its length
     * is out of bounds; dropped (counted) when the takers are busy.
     */
    public boolean take(String from, CacheKey key, long lengthBytes) {
        var h = homes;
        var member = h == null ? null : h.member(from);
        if (member == null || member.name().equals(h.self()) || !h.homedHere(key) || lengthBytes <= 0 || lengthBytes > MAX_ENTRY_BYTES
                || local.holds(key)) return false;
        try {
            takers.execute(() -> {
                try (var arena = java.lang.foreign.Arena.ofConfined()) {
                    var dst = arena.allocate(lengthBytes, 64);
                    if (peers.fetch(member, key, dst) && local.write(key, dst)) {
                        taken.increment();
                        takenBytes.add(lengthBytes);
                    } else {
                        takeDropped.increment();
                    }
                } catch (Exception e) {
                    takeDropped.increment();
                }
            });
            return true;
        } catch (java.util.concurrent.RejectedExecutionException busy) { // the takers' queue is full, or closed
            takeDropped.increment();
            return false;
        }
    }

    private byte[] fromOutbox(CacheKey key) {
        synchronized (outbox) {
            var o = outbox.remove(key);
            if (o == null) return null;
            outboxBytes -= o.bytes().length;
            return o.bytes();
        }
    }

    private boolean down(CacheHomes.Member m) { return down.containsKey(m.name()); }

    /**
     * Home {@code m} failed: down, and probed from its shortest down period on (1 s, doubled with each failure since its
     * last answered fetch or offer); a failure while it is down (a reader that asked it just before) changes nothing.
     */
    private void markDown(CacheHomes.Member m) {
        int s = strikes.merge(m.name(), 1, Integer::sum);
        long shortest = Math.min(MAX_DOWN_NANOS, MIN_DOWN_NANOS << Math.min(s - 1, 16));
        if (down.putIfAbsent(m.name(), shortest) != null) return;
        schedule(m, generation.get(), shortest);
    }

    private void schedule(CacheHomes.Member m, long g, long afterNanos) {
        try {
            probes.schedule(() -> probe(m, g), afterNanos, TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.RejectedExecutionException closed) { // closed: nothing more to ask
        }
    }

    /** A probe of a home that is down: answered, it is up (asked again from now on); else probed again. */
    private void probe(CacheHomes.Member m, long g) {
        if (generation.get() != g || !down.containsKey(m.name())) return;
        try {
            peers.reach(m, false);
        } catch (Exception e) {
            if (generation.get() == g) schedule(m, g, PROBE_NANOS);
            return;
        }
        if (generation.get() == g) down.remove(m.name());
    }

    public Stats stats() {
        return new Stats(localHits.sum(), localMisses.sum(), remoteHits.sum(), remoteMisses.sum(), fallbacks.sum(), fetchedBytes.sum(),
                offered.sum(), outboxDropped.sum(), taken.sum(), takenBytes.sum(), takeDropped.sum(), served.sum(), servedBytes.sum());
    }

    /** Stops taking offers (the ones under way end on their own); the local cache stays open (its owner closes it). */
    @Override
    public void close() {
        generation.incrementAndGet();
        probes.shutdownNow();
        takers.shutdownNow();
        synchronized (outbox) {
            outbox.clear();
            outboxBytes = 0;
        }
    }
}
