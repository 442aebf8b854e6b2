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
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A loopback HTTP/1.1 reverse proxy that answers requests from a programmable plan of faults
 * (503 SlowDown, 500, a delayed answer, a connection reset) and passes the rest through to an
 * upstream server byte for byte, so that retry logic can be tested against a real S3 API.
 *
 * <p>Plan: {@link #enqueue} queues faults consumed one per request in arrival order; when the queue
 * is empty {@link #setDefault} applies (initially {@link #pass()}).
 *
 * <p>Threading: thread-safe; one virtual thread per client connection, each with its own upstream
 * connection.
 */
public final class FaultProxy implements AutoCloseable {
    /** What the proxy does with one request. */
    public sealed interface Fault permits Pass, Status, Delay, Reset {}

    /** Forward to the upstream server. */
    public record Pass() implements Fault {}

    /** Answer with {@code status} and an S3 error document with {@code code}, without forwarding. */
    public record Status(int status, String code) implements Fault {}

    /** Wait {@code delayMillis}, then forward (the client may have given up by then). */
    public record Delay(long delayMillis) implements Fault {}

    /** Close the client connection with a TCP reset instead of answering. */
    public record Reset() implements Fault {}

    public static Fault pass() { return new Pass(); }

    public static Fault slowDown() { return new Status(503, "SlowDown"); }

    public static Fault internalError() { return new Status(500, "InternalError"); }

    public static Fault delay(long delayMillis) { return new Delay(delayMillis); }

    public static Fault reset() { return new Reset(); }

    private static final int MAX_HEAD_BYTES = 64 * 1024;

    private final ServerSocket server;
    private final InetSocketAddress upstream;
    private final ArrayDeque<Fault> plan = new ArrayDeque<>();
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

    /** The fault for requests that find the queue empty. */
    public FaultProxy setDefault(Fault fault) {
        synchronized (plan) {
            defaultFault = fault;
        }
        return this;
    }

    /** Empties the plan, restores pass-through and zeroes the counters. */
    public void clear() {
        synchronized (plan) {
            plan.clear();
            defaultFault = pass();
        }
        requests.set(0);
        injected.set(0);
    }

    /** Requests received since start or {@link #clear()}. */
    public int requests() { return requests.get(); }

    /** Requests answered with a fault (anything but a pass) since start or {@link #clear()}. */
    public int injected() { return injected.get(); }

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

    private Fault next() {
        synchronized (plan) {
            Fault f = plan.poll();
            return f != null ? f : defaultFault;
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
                Fault fault = next();
                if (!(fault instanceof Pass)) injected.incrementAndGet();
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
                    case Pass _ -> { }
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

    private record Head(byte[] raw, String method, int status, Map<String, String> headers) {}

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
        return new Head(raw, status == 0 ? first[0] : "", status, headers);
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
