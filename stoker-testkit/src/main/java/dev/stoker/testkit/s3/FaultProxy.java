package dev.stoker.testkit.s3;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A loopback HTTP/1.1 reverse proxy that answers requests from a programmable plan of faults
 * (503 SlowDown, 500, a delayed answer, a connection reset, a body that trickles, a reset in the
 * middle of the body) and passes the rest through to an upstream server byte for byte, so that
 * retry logic can be tested against a real S3 API.
 *
 * <p>Plan: {@link #enqueue} queues faults consumed one per request in arrival order; a request that
 * finds the queue empty asks the {@link #addRule rules} in the order they were added (a rule sees the
 * request's method, target and how many requests for that target came before, so it can fault one
 * object persistently, or a seeded fraction of requests independently of their arrival order); when
 * no rule answers, {@link #setDefault} applies (initially {@link #pass()}).
 *
 * <p>Threading: thread-safe; one virtual thread per client connection, each with its own upstream
 * connection.
 */
public final class FaultProxy implements AutoCloseable {
    /** What the proxy does with one request. */
    public sealed interface Fault permits Pass, Status, Delay, Reset, SlowBody, BodyReset {}

    /** Forward to the upstream server. */
    public record Pass() implements Fault {}

    /** Answer with {@code status} and an S3 error document with {@code code}, without forwarding. */
    public record Status(int status, String code) implements Fault {}

    /** Wait {@code delayMillis}, then forward (the client may have given up by then). */
    public record Delay(long delayMillis) implements Fault {}

    /** Close the client connection with a TCP reset instead of answering. */
    public record Reset() implements Fault {}

    /**
     * Forward, send the answer's head at once, then its body {@code bytes} bytes every
     * {@code everyMillis} ms: a server that is alive but too slow, which only a timeout that covers
     * the whole body (not just the wait for the head) notices.
     */
    public record SlowBody(int bytes, long everyMillis) implements Fault {
        public SlowBody {
            if (bytes < 1 || everyMillis < 0) throw new IllegalArgumentException("bytes must be >= 1 and everyMillis >= 0");
        }
    }

    /**
     * Forward, send the answer's head and the first {@code afterBytes} bytes of its body (at most all
     * but one), then close the connection with a TCP reset: a connection lost mid-transfer.
     */
    public record BodyReset(long afterBytes) implements Fault {
        public BodyReset {
            if (afterBytes < 0) throw new IllegalArgumentException("afterBytes must be >= 0");
        }
    }

    /**
     * One request as a {@link Rule} sees it: {@code target} is the request target (path and query,
     * e.g. {@code /bucket/ds/a.png}), {@code range} its {@code Range} header or "" (a ranged GET reads
     * one record of an object whose other records are read at the same time: each range is a target
     * of its own), {@code earlier} how many requests with the same method, target and range the proxy
     * received before this one.
     */
    public record Request(String method, String target, String range, int earlier) {
        /** What identifies the requests a row of faults counts over: method, target and range. */
        public String key() { return method + " " + target + (range.isEmpty() ? "" : " " + range); }

        /** The target without its query string. */
        public String path() {
            int q = target.indexOf('?');
            return q < 0 ? target : target.substring(0, q);
        }
    }

    /** Chooses the fault for a request, or null to leave it to the next rule (and then the default). */
    @FunctionalInterface
    public interface Rule {
        Fault apply(Request request);
    }

    public static Fault pass() { return new Pass(); }

    public static Fault slowDown() { return new Status(503, "SlowDown"); }

    public static Fault internalError() { return new Status(500, "InternalError"); }

    public static Fault delay(long delayMillis) { return new Delay(delayMillis); }

    public static Fault reset() { return new Reset(); }

    public static Fault slowBody(int bytes, long everyMillis) { return new SlowBody(bytes, everyMillis); }

    public static Fault bodyReset(long afterBytes) { return new BodyReset(afterBytes); }

    /**
     * {@code fault} for every request whose path ends with {@code pathSuffix} (e.g.
     * {@code /images/a.png}): a persistent fault on one object.
     */
    public static Rule always(String pathSuffix, Fault fault) {
        return r -> r.path().endsWith(pathSuffix) ? fault : null;
    }

    /**
     * A seeded {@code fraction} of requests get one of {@code faults}, chosen by a hash of the seed,
     * the target and the request's {@link Request#earlier() count}, so that the same requests get the
     * same faults whatever order they arrive in. Never more than {@code maxInARow} faults in a row
     * for one {@link Request#key() key} (method, target and range): a client that retries at least that
     * often always gets through (as long as it does not fetch the same range of a target concurrently,
     * which would interleave the rows).
     */
    public static Rule sometimes(double fraction, long seed, int maxInARow, List<Fault> faults) {
        if (!(fraction >= 0 && fraction <= 1)) throw new IllegalArgumentException("fraction must be in [0, 1]: " + fraction);
        if (faults.isEmpty()) throw new IllegalArgumentException("no faults to choose from");
        List<Fault> choices = List.copyOf(faults);
        Map<String, Integer> inARow = new ConcurrentHashMap<>();
        return r -> {
            String key = r.key();
            long h = mix(seed ^ mix(key.hashCode()) ^ mix(r.earlier() + 0x9E3779B97F4A7C15L));
            double u = (h >>> 11) * 0x1.0p-53;
            if (u >= fraction || inARow.getOrDefault(key, 0) >= maxInARow) {
                inARow.put(key, 0);
                return null;
            }
            inARow.merge(key, 1, Integer::sum);
            return choices.get((int) Math.floorMod(mix(h), (long) choices.size()));
        };
    }

    /** SplitMix64's finaliser: spreads every input bit over the result. */
    private static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    private static final int MAX_HEAD_BYTES = 64 * 1024;

    private final ServerSocket server;
    private final InetSocketAddress upstream;
    private final ArrayDeque<Fault> plan = new ArrayDeque<>();
    private final List<Rule> rules = new ArrayList<>();
    private final Map<String, AtomicInteger> seen = new ConcurrentHashMap<>();
    private final Map<String, AtomicInteger> injectedByPath = new ConcurrentHashMap<>();
    private final Map<Class<?>, AtomicInteger> injectedByKind = new ConcurrentHashMap<>();
    private final Set<Socket> open = ConcurrentHashMap.newKeySet();
    private final AtomicInteger requests = new AtomicInteger();
    private final AtomicInteger injected = new AtomicInteger();
    private final Thread acceptor;
    private Fault defaultFault = pass();
    private volatile boolean closed;

    private FaultProxy(ServerSocket server, InetSocketAddress upstream) {
        this.server = server;
        this.upstream = upstream;
        this.acceptor = Thread.ofPlatform().daemon().name("fault-proxy-accept-" + server.getLocalPort()).start(this::acceptLoop);
    }

    /** Starts a proxy on 127.0.0.1 and a free port in front of {@code upstream} (an http:// URI). */
    public static FaultProxy start(URI upstream) throws IOException {
        if (!"http".equals(upstream.getScheme())) throw new IllegalArgumentException("upstream must be http://: " + upstream);
        int port = upstream.getPort() < 0 ? 80 : upstream.getPort();
        var server = new ServerSocket(0, 128, InetAddress.getLoopbackAddress());
        return new FaultProxy(server, new InetSocketAddress(upstream.getHost(), port));
    }

    /** {@code http://127.0.0.1:<port>}. */
    public URI endpoint() { return URI.create("http://127.0.0.1:" + server.getLocalPort()); }

    /** Applies {@code fault} to the next {@code times} requests (after those already queued). */
    public FaultProxy enqueue(Fault fault, int times) {
        synchronized (plan) {
            for (int i = 0; i < times; i++) plan.add(fault);
        }
        return this;
    }

    /** Adds a rule asked, after the earlier ones, by requests that find the queue empty. */
    public FaultProxy addRule(Rule rule) {
        synchronized (plan) {
            rules.add(rule);
        }
        return this;
    }

    /** The fault for requests that find the queue empty and no rule that answers. */
    public FaultProxy setDefault(Fault fault) {
        synchronized (plan) {
            defaultFault = fault;
        }
        return this;
    }

    /** Empties the plan, drops the rules, restores pass-through and zeroes the counters. */
    public void clear() {
        synchronized (plan) {
            plan.clear();
            rules.clear();
            defaultFault = pass();
        }
        requests.set(0);
        injected.set(0);
        seen.clear();
        injectedByPath.clear();
        injectedByKind.clear();
    }

    /** Requests received since start or {@link #clear()}. */
    public int requests() { return requests.get(); }

    /** Requests answered with a fault (anything but a pass) since start or {@link #clear()}. */
    public int injected() { return injected.get(); }

    /** Faults of {@code kind} (e.g. {@code SlowBody.class}) injected since start or {@link #clear()}. */
    public int injected(Class<? extends Fault> kind) {
        var n = injectedByKind.get(kind);
        return n == null ? 0 : n.get();
    }

    /** Faults injected into requests whose path ends with {@code pathSuffix} since start or {@link #clear()}. */
    public int injected(String pathSuffix) {
        return injectedByPath.entrySet().stream().filter(e -> e.getKey().endsWith(pathSuffix)).mapToInt(e -> e.getValue().get()).sum();
    }

    @Override
    public void close() {
        closed = true;
        closeQuietly(server);
        open.forEach(FaultProxy::closeQuietly);
        try {
            acceptor.join(2000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private Fault next(Head request) {
        String range = request.headers().getOrDefault("range", "");
        var key = new Request(request.method(), request.target(), range, 0).key();
        var r = new Request(request.method(), request.target(), range, seen.computeIfAbsent(key, k -> new AtomicInteger()).getAndIncrement());
        synchronized (plan) {
            Fault f = plan.poll();
            if (f != null) return f;
            for (Rule rule : rules) {
                f = rule.apply(r);
                if (f != null) return f;
            }
            return defaultFault;
        }
    }

    private void acceptLoop() {
        while (!closed) {
            try {
                Socket client = server.accept();
                open.add(client);
                Thread.ofVirtual().name("fault-proxy-conn").start(() -> serve(client));
            } catch (IOException e) {
                if (closed) return;
            }
        }
    }

    private void serve(Socket client) {
        Socket up = null;
        try {
            client.setTcpNoDelay(true);
            var in = new BufferedInputStream(client.getInputStream());
            var out = new BufferedOutputStream(client.getOutputStream());
            while (!closed) {
                Head request = readHead(in);
                if (request == null) return;
                byte[] body = readRequestBody(in, request);
                requests.incrementAndGet();
                Fault fault = next(request);
                if (!(fault instanceof Pass)) {
                    injected.incrementAndGet();
                    injectedByPath.computeIfAbsent(new Request(request.method(), request.target(), "", 0).path(), k -> new AtomicInteger())
                            .incrementAndGet();
                    injectedByKind.computeIfAbsent(fault.getClass(), k -> new AtomicInteger()).incrementAndGet();
                }
                switch (fault) {
                    case Reset _ -> {
                        client.setSoLinger(true, 0);
                        client.close();
                        return;
                    }
                    case Status s -> {
                        writeError(out, s);
                        continue;
                    }
                    case Delay d -> Thread.sleep(d.delayMillis());
                    case Pass _, SlowBody _, BodyReset _ -> { }
                }
                if (up == null || up.isClosed()) {
                    up = new Socket();
                    up.connect(upstream, 5000);
                    up.setTcpNoDelay(true);
                    open.add(up);
                }
                var upOut = new BufferedOutputStream(up.getOutputStream());
                upOut.write(request.raw());
                upOut.write(body);
                upOut.flush();
                var upIn = new BufferedInputStream(up.getInputStream());
                Head response = readHead(upIn);
                if (response == null) throw new EOFException("upstream closed the connection");
                if ((fault instanceof SlowBody || fault instanceof BodyReset) && hasBody(response, request)) {
                    // the whole body from upstream first, so that its connection stays usable; then the fault
                    var raw = new ByteArrayOutputStream();
                    if (copyBody(upIn, raw, response, true)) {
                        closeQuietly(up);
                        open.remove(up);
                        up = null;
                    }
                    out.write(response.raw());
                    byte[] answer = raw.toByteArray();
                    if (fault instanceof SlowBody slow) {
                        trickle(out, answer, slow);
                        continue;
                    }
                    long cut = Math.min(((BodyReset) fault).afterBytes(), Math.max(0, answer.length - 1L));
                    out.write(answer, 0, (int) cut);
                    out.flush();
                    client.setSoLinger(true, 0);
                    client.close();
                    return;
                }
                out.write(response.raw());
                boolean untilEof = relayBody(upIn, out, response, request.method().equals("HEAD"));
                out.flush();
                if (untilEof || "close".equalsIgnoreCase(response.headers().get("connection"))) {
                    closeQuietly(up);
                    open.remove(up);
                    up = null;
                    if (untilEof) return;
                }
            }
        } catch (IOException | InterruptedException e) {
            // the client or upstream went away; the connection ends
        } finally {
            closeQuietly(client);
            open.remove(client);
            if (up != null) {
                closeQuietly(up);
                open.remove(up);
            }
        }
    }

    /** Sends {@code body} a few bytes at a time; the client giving up ends it with an IOException. */
    private void trickle(OutputStream out, byte[] body, SlowBody slow) throws IOException, InterruptedException {
        for (int at = 0; at < body.length && !closed; at += slow.bytes()) {
            out.write(body, at, Math.min(slow.bytes(), body.length - at));
            out.flush();
            if (slow.everyMillis() > 0) Thread.sleep(slow.everyMillis());
        }
        out.flush();
    }

    private static boolean hasBody(Head response, Head request) {
        return !request.method().equals("HEAD") && response.status() / 100 != 1 && response.status() != 204 && response.status() != 304;
    }

    private record Head(byte[] raw, String method, String target, int status, Map<String, String> headers) {}

    private static Head readHead(InputStream in) throws IOException {
        var buf = new ByteArrayOutputStream(512);
        int state = 0;
        while (state < 4) {
            int b = in.read();
            if (b < 0) {
                if (buf.size() == 0) return null;
                throw new EOFException("connection closed inside an HTTP head");
            }
            buf.write(b);
            if (buf.size() > MAX_HEAD_BYTES) throw new IOException("HTTP head over " + MAX_HEAD_BYTES + " bytes");
            state = switch (state) {
                case 0, 2 -> b == '\r' ? state + 1 : 0;
                case 1, 3 -> b == '\n' ? state + 1 : (b == '\r' ? 1 : 0);
                default -> state;
            };
        }
        byte[] raw = buf.toByteArray();
        String[] lines = new String(raw, StandardCharsets.ISO_8859_1).split("\r\n");
        Map<String, String> headers = new HashMap<>();
        for (int i = 1; i < lines.length; i++) {
            int colon = lines[i].indexOf(':');
            if (colon > 0) headers.put(lines[i].substring(0, colon).trim().toLowerCase(Locale.ROOT), lines[i].substring(colon + 1).trim());
        }
        String[] first = lines[0].split(" ", 3);
        int status = first[0].startsWith("HTTP/") && first.length > 1 ? Integer.parseInt(first[1]) : 0;
        return new Head(raw, status == 0 ? first[0] : "", status == 0 && first.length > 1 ? first[1] : "", status, headers);
    }

    private static byte[] readRequestBody(InputStream in, Head head) throws IOException {
        var sink = new ByteArrayOutputStream();
        copyBody(in, sink, head, false);
        return sink.toByteArray();
    }

    /** Relays a response body; true when it is delimited by the end of the connection. */
    private static boolean relayBody(InputStream in, OutputStream out, Head head, boolean headRequest) throws IOException {
        if (headRequest || head.status() / 100 == 1 || head.status() == 204 || head.status() == 304) return false;
        return copyBody(in, out, head, true);
    }

    private static boolean copyBody(InputStream in, OutputStream out, Head head, boolean response) throws IOException {
        String te = head.headers().get("transfer-encoding");
        if (te != null && te.toLowerCase(Locale.ROOT).contains("chunked")) {
            copyChunked(in, out);
            return false;
        }
        String cl = head.headers().get("content-length");
        if (cl != null) {
            copyExactly(in, out, Long.parseLong(cl));
            return false;
        }
        if (!response) return false;
        in.transferTo(out);
        return true;
    }

    private static void copyChunked(InputStream in, OutputStream out) throws IOException {
        while (true) {
            String sizeLine = copyLine(in, out);
            int semi = sizeLine.indexOf(';');
            long size = Long.parseLong((semi >= 0 ? sizeLine.substring(0, semi) : sizeLine).trim(), 16);
            if (size == 0) {
                while (!copyLine(in, out).isEmpty()) { }
                return;
            }
            copyExactly(in, out, size);
            copyLine(in, out);
        }
    }

    private static String copyLine(InputStream in, OutputStream out) throws IOException {
        var line = new StringBuilder();
        while (true) {
            int b = in.read();
            if (b < 0) throw new EOFException("connection closed inside a chunked body");
            out.write(b);
            if (b == '\n') break;
            if (b != '\r') line.append((char) b);
        }
        return line.toString();
    }

    private static void copyExactly(InputStream in, OutputStream out, long length) throws IOException {
        byte[] buf = new byte[8192];
        long left = length;
        while (left > 0) {
            int n = in.read(buf, 0, (int) Math.min(buf.length, left));
            if (n < 0) throw new EOFException("connection closed with " + left + " body bytes to go");
            out.write(buf, 0, n);
            left -= n;
        }
    }

    private static void writeError(OutputStream out, Status s) throws IOException {
        byte[] body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + s.code() + "</Code><Message>injected by FaultProxy</Message>"
                + "<RequestId>fault-proxy</RequestId></Error>").getBytes(StandardCharsets.UTF_8);
        String head = "HTTP/1.1 " + s.status() + " " + reason(s.status()) + "\r\n"
                + "Content-Type: application/xml\r\n"
                + "Content-Length: " + body.length + "\r\n"
                + "x-amz-request-id: fault-proxy\r\n"
                + "\r\n";
        out.write(head.getBytes(StandardCharsets.ISO_8859_1));
        out.write(body);
        out.flush();
    }

    private static String reason(int status) {
        return switch (status) {
            case 500 -> "Internal Server Error";
            case 503 -> "Service Unavailable";
            case 404 -> "Not Found";
            case 403 -> "Forbidden";
            default -> "Error";
        };
    }

    private static void closeQuietly(AutoCloseable c) {
        try {
            c.close();
        } catch (Exception ignored) {
            // closing anyway
        }
    }
}
