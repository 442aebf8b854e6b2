package dev.stoker.cluster;

import dev.stoker.flight.FlightBatchClient;
import dev.stoker.flight.FlightBatchServer;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Predicate;
import org.apache.arrow.memory.BufferAllocator;

/**
 * The coordinator's node passing batches on ({@code --retrieval relay}): a rank's node asks the coordinator's Flight server
 * for object {@code job/relay~HOST:PORT~KEY}, and this node fetches object {@code job/KEY} from the owner's Flight endpoint
 * {@code HOST:PORT} and sends its tensors on, so every batch made on a third node crosses the coordinator's card twice. It is
 * the data path of a driver that hands out every batch, which the talk's ablation calls "retrieval off"; {@code direct}
 * retrieval (the default) pulls from the owner. Only endpoints on a member's host are fetched from (a peer with the Flight
 * token cannot make the node connect elsewhere); a batch is held (its client busy) until the server has sent it.
 */
final class BatchRelay implements AutoCloseable {
    static final String PREFIX = "relay~";
    /** Clients per owner endpoint: relays from one owner at once. */
    static final int CLIENTS_PER_OWNER = 4;
    /** Longest a relay waits for a free client of its owner. */
    static final long CLIENT_WAIT_SECONDS = 60;

    private record Owner(BlockingQueue<FlightBatchClient> idle, AtomicInteger made) {}

    private final FlightBatchClient.Options options;
    private final BufferAllocator allocator;
    private final Predicate<String> memberHost;
    private final Map<String, Owner> owners = new ConcurrentHashMap<>();
    final AtomicLong batches = new AtomicLong(), bytes = new AtomicLong();
    private volatile boolean closed;

    BatchRelay(FlightBatchClient.Options options, BufferAllocator allocator, Predicate<String> memberHost) {
        this.options = options;
        this.allocator = allocator;
        this.memberHost = memberHost;
    }

    /** The name under which a rank's node asks the relay for object {@code key} of the node whose Flight endpoint is given. */
    static String key(String flightHost, int flightPort, String key) { return PREFIX + flightHost + ":" + flightPort + "~" + key; }

    /** Whether {@code key} names a relayed object. */
    static boolean relayed(String key) { return key.startsWith(PREFIX); }

    /** The owner's own key of a relayed object's key; {@code key} itself otherwise. */
    static String ownKey(String key) { return relayed(key) ? key.substring(key.lastIndexOf('~') + 1) : key; }

    /**
     * Fetches object {@code job/own} from the owner named in relayed {@code key}: its tensors, held until {@code done}.
     *
     * @throws IllegalArgumentException a malformed key, or an owner not on a member's host
     */
    FlightBatchServer.Lent fetch(String job, String key) throws InterruptedException {
        int end = key.lastIndexOf('~');
        String endpoint = end > PREFIX.length() ? key.substring(PREFIX.length(), end) : "";
        int colon = endpoint.lastIndexOf(':');
        int port = colon > 0 ? parsePort(endpoint.substring(colon + 1)) : -1;
        if (port < 0 || end == key.length() - 1) throw new IllegalArgumentException("malformed relayed object " + job + "/" + key);
        String host = endpoint.substring(0, colon);
        if (!memberHost.test(host))
            throw new IllegalArgumentException("relayed object " + job + "/" + key + ": " + host + " is not a member of this cluster");
        if (closed) throw new IllegalStateException("the relay is closed");
        var owner = owners.computeIfAbsent(endpoint, e -> new Owner(new ArrayBlockingQueue<>(CLIENTS_PER_OWNER), new AtomicInteger()));
        FlightBatchClient client = owner.idle().poll();
        if (client == null && owner.made().incrementAndGet() <= CLIENTS_PER_OWNER) {
            client = FlightBatchClient.connect(host, port, options, allocator);
        } else if (client == null) {
            owner.made().decrementAndGet();
            client = owner.idle().poll(CLIENT_WAIT_SECONDS, TimeUnit.SECONDS);
            if (client == null)
                throw new IllegalStateException("relay of " + job + "/" + key + ": no client of " + endpoint + " free for "
                        + CLIENT_WAIT_SECONDS + " s");
        }
        var used = client;
        try {
            var batch = used.next(0, 1, job + "/" + ownKey(key));
            if (batch == null) throw new IllegalStateException("owner " + endpoint + " sent no batch for " + ownKey(key));
            batches.incrementAndGet();
            bytes.addAndGet(batch.totalBytes());
            return new FlightBatchServer.Lent(batch.meta(), batch.tensors(), () -> giveBack(owner, used));
        } catch (RuntimeException e) {
            giveBack(owner, used);
            throw e;
        }
    }

    private void giveBack(Owner owner, FlightBatchClient client) {
        if (closed || !owner.idle().offer(client)) client.close();
    }

    private static int parsePort(String text) {
        if (text.isEmpty() || text.length() > 5 || !text.chars().allMatch(Character::isDigit)) return -1;
        int p = Integer.parseInt(text);
        return p >= 1 && p <= 65535 ? p : -1;
    }

    @Override
    public void close() {
        closed = true;
        for (var o : owners.values()) {
            FlightBatchClient c;
            while ((c = o.idle().poll()) != null) c.close();
        }
    }
}
