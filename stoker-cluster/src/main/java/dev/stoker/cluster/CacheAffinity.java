package dev.stoker.cluster;

import dev.stoker.cache.AffineCache;
import dev.stoker.cache.CacheHomes;
import dev.stoker.cache.CacheKey;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.flight.FlightBatchServer;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Function;
import org.apache.arrow.memory.BufferAllocator;

/**
 * The cache's affinity over the nodes' Flight endpoints: how a node asks another for a cache entry and offers it one
 * ({@link AffineCache.Peers}), and how it answers them ({@link FlightBatchServer.Actions}). Three DoAction types, all
 * behind the endpoint's token and TLS:
 *
 * <pre>
 *   stoker.cache.get    body "JOB\nKEYHEX\nLENGTH"        answer: the entry's raw bytes in results of at most 256 KiB;
 *                                                         no result: a miss
 *   stoker.cache.offer  body "JOB\nFROM\nKEYHEX\nLENGTH"  answer: one byte, 1 when the home will take the entry (it fetches
 *                                                         it from FROM on a thread of its own), else 0
 *   stoker.cache.ping   body "JOB"                       answer: one byte, 1 (the channel is open and the node answers:
 *                                                         sent ahead when the homes are named, and to probe a home that is down)
 * </pre>
 *
 * A fetch is bounded: {@link #FETCH_TIMEOUT_MS}, and an answer of any other length than asked is refused; the caller
 * ({@link AffineCache}) then computes the entry itself. Entries are the resized u8 pixels the cache holds, never float32.
 */
final class CacheAffinity implements FlightBatchServer.Actions, AutoCloseable {
    static final String GET = "stoker.cache.get", OFFER = "stoker.cache.offer", PING = "stoker.cache.ping";
    /** Longest a fetch of one entry may take (a 1.3 MB image entry takes milliseconds on a node's link). */
    static final long FETCH_TIMEOUT_MS = 5_000;
    /**
     * Longest a channel's first call may take: the ping sent ahead when the homes are named, which opens the channel (a TLS
     * handshake with a member whose JVM is busy opening the job; on a loaded 2-core VM that took more than the 5 s of a
     * fetch). On a probe thread, never a reader's.
     */
    static final long FIRST_CALL_TIMEOUT_MS = 20_000;
    /** Longest an offer may take (a few hundred bytes each way). */
    static final long OFFER_TIMEOUT_MS = 2_000;
    /** Bytes per result of a get's answer. */
    static final int CHUNK_BYTES = 256 << 10;
    /** Longest request body read (job ids and member addresses are short). */
    static final int MAX_REQUEST_BYTES = 4096;
    /** Bytes a job's node keeps for homes to take (AffineCache's outbox). */
    static final long OUTBOX_BYTES = 256L << 20;

    private final FlightBatchClient.Options options;
    private final BufferAllocator allocator;
    /** A job's affine cache on this node, or null. */
    private final Function<String, AffineCache> jobs;
    private final Map<String, FlightBatchClient> clients = new ConcurrentHashMap<>();
    private volatile boolean closed;

    private final long fetchTimeoutMillis, offerTimeoutMillis;

    CacheAffinity(FlightBatchClient.Options options, BufferAllocator allocator, Function<String, AffineCache> jobs) {
        this(options, allocator, jobs, FETCH_TIMEOUT_MS, OFFER_TIMEOUT_MS);
    }

    /** With deadlines of its own for a fetch and an offer (tests). */
    CacheAffinity(FlightBatchClient.Options options, BufferAllocator allocator, Function<String, AffineCache> jobs, long fetchTimeoutMillis,
                  long offerTimeoutMillis) {
        this.options = options;
        this.allocator = allocator;
        this.jobs = jobs;
        this.fetchTimeoutMillis = fetchTimeoutMillis;
        this.offerTimeoutMillis = offerTimeoutMillis;
    }

    /** Job {@code job}'s peers as this node reaches them; {@code self}: this node's member name, sent with its offers. */
    AffineCache.Peers peers(String job, String self) {
        return new AffineCache.Peers() {
            @Override
            public boolean fetch(CacheHomes.Member member, CacheKey key, MemorySegment dst) {
                long n = client(member).action(GET, body(job, key.hex(), Long.toString(dst.byteSize())), fetchTimeoutMillis, dst);
                if (n == 0) return false;
                if (n != dst.byteSize())
                    throw new IllegalStateException(member.name() + " sent " + n + " bytes of entry " + key + ", " + dst.byteSize() + " expected");
                return true;
            }

            @Override
            public boolean offer(CacheHomes.Member home, CacheKey key, long lengthBytes) {
                var answer = MemorySegment.ofArray(new byte[1]);
                long n = client(home).action(OFFER, body(job, self, key.hex(), Long.toString(lengthBytes)), offerTimeoutMillis, answer);
                return n == 1 && answer.get(ValueLayout.JAVA_BYTE, 0) == 1;
            }

            @Override
            public void reach(CacheHomes.Member member, boolean first) {
                var answer = MemorySegment.ofArray(new byte[1]);
                long n = client(member).action(PING, body(job), first ? Math.max(FIRST_CALL_TIMEOUT_MS, fetchTimeoutMillis) : fetchTimeoutMillis, answer);
                if (n != 1 || answer.get(ValueLayout.JAVA_BYTE, 0) != 1)
                    throw new IllegalStateException(member.name() + " answered a ping with " + n + " bytes");
            }
        };
    }

    private FlightBatchClient client(CacheHomes.Member m) {
        if (closed) throw new IllegalStateException("closed");
        return clients.computeIfAbsent(m.host() + ":" + m.port(), e -> FlightBatchClient.connect(m.host(), m.port(), options, allocator));
    }

    private static byte[] body(String... lines) { return String.join("\n", lines).getBytes(StandardCharsets.UTF_8); }

    @Override
    public boolean answer(String type, byte[] body, java.util.function.Consumer<byte[]> results) {
        if (!type.equals(GET) && !type.equals(OFFER) && !type.equals(PING)) return false;
        if (body.length > MAX_REQUEST_BYTES) throw new IllegalArgumentException(type + ": request of " + body.length + " bytes");
        String[] f = new String(body, StandardCharsets.UTF_8).split("\n", -1);
        if (type.equals(PING)) {
            if (f.length != 1) throw new IllegalArgumentException(type + ": malformed request");
            results.accept(new byte[] {1});
            return true;
        }
        if (f.length != (type.equals(GET) ? 3 : 4)) throw new IllegalArgumentException(type + ": malformed request");
        var cache = jobs.apply(f[0]);
        CacheKey key = CacheKey.ofHex(f[f.length - 2]);
        long length = parseLength(f[f.length - 1]);
        if (cache == null) return true; // the job is not here (ended, or its cache off): a miss, an offer not taken
        if (type.equals(OFFER)) {
            results.accept(new byte[] {(byte) (cache.take(f[1], key, length) ? 1 : 0)});
            return true;
        }
        if (!cache.holds(key)) return true; // a miss, known without reading (and without a buffer of the length asked)
        try (var arena = Arena.ofConfined()) {
            var entry = arena.allocate(length, 64);
            if (!cache.serve(key, entry)) return true;
            for (long at = 0; at < length; at += CHUNK_BYTES)
                results.accept(entry.asSlice(at, Math.min(CHUNK_BYTES, length - at)).toArray(ValueLayout.JAVA_BYTE));
        }
        return true;
    }

    private static long parseLength(String text) {
        long n;
        try {
            n = Long.parseLong(text);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("bad entry length " + text);
        }
        if (n <= 0 || n > AffineCache.MAX_ENTRY_BYTES) throw new IllegalArgumentException("entry length " + n + " out of bounds");
        return n;
    }

    @Override
    public void close() {
        closed = true;
        for (var c : clients.values()) c.close();
        clients.clear();
    }
}
