package dev.stoker.testkit.s3;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * The Adobe S3Mock standalone jar run as a child process on loopback, with helpers to create
 * buckets and upload objects over plain path-style HTTP.
 *
 * <p>Ports: S3Mock opens two connectors. The main one ({@code server.port}, HTTPS by default) honours
 * {@code server.address}, so it is made plain HTTP and bound to 127.0.0.1; that is the endpoint.
 * The second one ({@code com.adobe.testing.s3mock.httpPort}, default 9090; the documented
 * {@code --http.port} flag is ignored on the command line) always binds every interface, so it is
 * pinned to another free port and never used.
 *
 * <p>Startup takes seconds (Spring Boot): share one server per test class or per test run
 * (see {@link S3MockExtension}); the JVM runs with C1 only and a CDS archive next to the jar when
 * that folder is writable.
 *
 * <p>Threading: thread-safe; {@link #close()} is idempotent and also runs from a shutdown hook.
 */
public final class S3MockServer implements AutoCloseable {
    /** System property naming the S3Mock {@code exec} jar. */
    public static final String JAR_PROP_NAME = "stoker.s3mock.jar";
    /** System property naming the java launcher for S3Mock (default: the running JVM's). */
    public static final String JAVA_PROP_NAME = "stoker.s3mock.java";
    /** System property: how long to wait for S3Mock to answer, in seconds. */
    public static final String START_TIMEOUT_PROP_NAME = "stoker.s3mock.startTimeoutSeconds";
    public static final long START_TIMEOUT_SECONDS_DEFAULT = 120;

    private static final int LOG_TAIL_LINES = 40;
    private static final int START_ATTEMPTS = 3;

    private final Process process;
    private final Path workDir;
    private final Path logFile;
    private final URI endpoint;
    private final long startMillis;
    private final HttpClient http;
    private final Thread shutdownHook;
    private boolean closed;

    private S3MockServer(Process process, Path workDir, Path logFile, URI endpoint, long startMillis) {
        this.process = process;
        this.workDir = workDir;
        this.logFile = logFile;
        this.endpoint = endpoint;
        this.startMillis = startMillis;
        this.http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(5)).build();
        this.shutdownHook = new Thread(this::stopProcess, "s3mock-shutdown");
        Runtime.getRuntime().addShutdownHook(shutdownHook);
    }

    /** Starts S3Mock from the jar named by {@value #JAR_PROP_NAME}. */
    public static S3MockServer start() throws IOException {
        var jar = System.getProperty(JAR_PROP_NAME);
        if (jar == null || jar.isBlank())
            throw new IllegalStateException("system property " + JAR_PROP_NAME + " is not set: it must name s3mock-<version>-exec.jar "
                    + "(the module's pom copies com.adobe.testing:s3mock:exec into target/ and passes its path to surefire)");
        return start(Path.of(jar));
    }

    /** Starts S3Mock from {@code jar} on free loopback ports with an empty store; returns once it answers. */
    public static S3MockServer start(Path jar) throws IOException {
        if (!Files.isRegularFile(jar)) throw new IllegalStateException("S3Mock jar not found: " + jar);
        long timeoutSeconds = Long.getLong(START_TIMEOUT_PROP_NAME, START_TIMEOUT_SECONDS_DEFAULT);
        IOException last = null;
        for (int attempt = 0; attempt < START_ATTEMPTS; attempt++) {
            try {
                return launch(jar, timeoutSeconds);
            } catch (PortTakenException e) {
                last = e;
            }
        }
        throw last;
    }

    private static final class PortTakenException extends IOException {
        private static final long serialVersionUID = 1L;
        PortTakenException(String message) { super(message); }
    }

    private static S3MockServer launch(Path jar, long timeoutSeconds) throws IOException {
        long t0 = System.nanoTime();
        Path work = Files.createTempDirectory("stoker-s3mock-");
        Path store = Files.createDirectory(work.resolve("store"));
        Path log = work.resolve("s3mock.log");
        int port = freePort();
        int unusedHttpPort = freePort();
        // its temporary folder inside the work folder, which close() deletes: Spring Boot's embedded Tomcat makes a
        // tomcat.<port>.<n> folder there that it does not remove on a SIGTERM, and /tmp gathered one per S3Mock started
        Path tmp = Files.createDirectory(work.resolve("tmp"));
        List<String> cmd = new ArrayList<>(List.of(javaLauncher(), "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss512k",
                "-Djava.io.tmpdir=" + tmp));
        Path cds = jar.toAbsolutePath().resolveSibling(jar.getFileName() + ".jsa");
        if (Files.isWritable(cds.getParent())) {
            cmd.add("-XX:SharedArchiveFile=" + cds);
            cmd.add("-XX:+AutoCreateSharedArchive");
        }
        cmd.addAll(List.of("-jar", jar.toAbsolutePath().toString(),
                "--server.address=127.0.0.1",
                "--server.port=" + port,
                "--server.ssl.enabled=false",
                "--com.adobe.testing.s3mock.httpPort=" + unusedHttpPort,
                "--com.adobe.testing.s3mock.store.root=" + store,
                "--spring.main.banner-mode=off",
                "--logging.level.root=WARN"));
        Process p = new ProcessBuilder(cmd).directory(work.toFile()).redirectErrorStream(true)
                .redirectOutput(log.toFile()).start();
        URI endpoint = URI.create("http://127.0.0.1:" + port);
        var probe = HttpClient.newBuilder().connectTimeout(Duration.ofMillis(500)).build();
        long deadline = t0 + TimeUnit.SECONDS.toNanos(timeoutSeconds);
        while (true) {
            if (!p.isAlive()) {
                String tail = tail(log);
                deleteTree(work);
                String msg = "S3Mock exited with status " + p.exitValue() + " before answering on " + endpoint + "; log tail:\n" + tail;
                if (tail.contains("already in use")) throw new PortTakenException(msg);
                throw new IOException(msg);
            }
            try {
                var resp = probe.send(HttpRequest.newBuilder(endpoint.resolve("/")).timeout(Duration.ofSeconds(2)).GET().build(),
                        HttpResponse.BodyHandlers.discarding());
                if (resp.statusCode() == 200) break;
            } catch (IOException e) {
                // not listening yet
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                destroyTree(p);
                deleteTree(work);
                throw new IOException("interrupted while waiting for S3Mock", e);
            }
            if (System.nanoTime() > deadline) {
                String tail = tail(log);
                destroyTree(p);
                deleteTree(work);
                throw new IOException("S3Mock did not answer on " + endpoint + " within " + timeoutSeconds + " s ("
                        + START_TIMEOUT_PROP_NAME + "); log tail:\n" + tail);
            }
            sleepMillis(50);
        }
        return new S3MockServer(p, work, log, endpoint, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0));
    }

    /** {@code http://127.0.0.1:<port>}; use path-style addressing. */
    public URI endpoint() { return endpoint; }

    /** Wall time from launch to the first answer, in milliseconds. */
    public long startMillis() { return startMillis; }

    /** The process id, to check that {@link #close()} stopped it. */
    public long pid() { return process.pid(); }

    public boolean isAlive() { return process.isAlive(); }

    /** The last lines of S3Mock's output. */
    public String logTail() { return tail(logFile); }

    /** Creates {@code bucket}; succeeds if this server already holds it. */
    public void createBucket(String bucket) {
        var resp = send(HttpRequest.newBuilder(objectUri(bucket, "")).PUT(HttpRequest.BodyPublishers.noBody()).build());
        if (resp.statusCode() != 200 && resp.statusCode() != 409)
            throw new IllegalStateException("create bucket " + bucket + ": HTTP " + resp.statusCode() + " " + resp.body());
    }

    public void putObject(String bucket, String key, byte[] bytes) {
        var resp = send(HttpRequest.newBuilder(objectUri(bucket, key)).PUT(HttpRequest.BodyPublishers.ofByteArray(bytes)).build());
        if (resp.statusCode() != 200)
            throw new IllegalStateException("put s3://" + bucket + "/" + key + ": HTTP " + resp.statusCode() + " " + resp.body());
    }

    /** The object's bytes, or null when it does not exist. */
    public byte[] getObject(String bucket, String key) {
        try {
            var resp = http.send(HttpRequest.newBuilder(objectUri(bucket, key)).GET().build(), HttpResponse.BodyHandlers.ofByteArray());
            if (resp.statusCode() == 404) return null;
            if (resp.statusCode() != 200)
                throw new IllegalStateException("get s3://" + bucket + "/" + key + ": HTTP " + resp.statusCode());
            return resp.body();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /**
     * Uploads every regular file under {@code dir} to {@code prefix + relative path} (with '/'
     * separators; {@code prefix} may be empty); returns the number of objects written.
     */
    public int putDirectory(String bucket, String prefix, Path dir) throws IOException {
        String p = prefix.isEmpty() || prefix.endsWith("/") ? prefix : prefix + "/";
        List<Path> files;
        try (Stream<Path> walk = Files.walk(dir)) {
            files = walk.filter(Files::isRegularFile).sorted().toList();
        }
        for (Path f : files) {
            String rel = dir.relativize(f).toString().replace(f.getFileSystem().getSeparator(), "/");
            putObject(bucket, p + rel, Files.readAllBytes(f));
        }
        return files.size();
    }

    private URI objectUri(String bucket, String key) {
        var sb = new StringBuilder(endpoint.toString()).append('/').append(encode(bucket));
        if (!key.isEmpty()) {
            for (String segment : key.split("/", -1)) sb.append('/').append(encode(segment));
        }
        return URI.create(sb.toString());
    }

    private static String encode(String segment) {
        return URLEncoder.encode(segment, StandardCharsets.UTF_8).replace("+", "%20");
    }

    private HttpResponse<String> send(HttpRequest request) {
        try {
            return http.send(request, HttpResponse.BodyHandlers.ofString());
        } catch (IOException e) {
            throw new UncheckedIOException("S3Mock request " + request.method() + " " + request.uri() + " failed; log tail:\n" + logTail(), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** Stops the process and its children, waits for them, and deletes the store. */
    @Override
    public synchronized void close() {
        if (closed) return;
        closed = true;
        stopProcess();
        try {
            Runtime.getRuntime().removeShutdownHook(shutdownHook);
        } catch (IllegalStateException shuttingDown) {
            // the hook is running or has run
        }
        http.close();
        deleteTree(workDir);
    }

    private void stopProcess() { destroyTree(process); }

    private static void destroyTree(Process p) {
        List<ProcessHandle> children = p.descendants().toList();
        p.destroy();
        children.forEach(ProcessHandle::destroy);
        try {
            if (!p.waitFor(10, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                p.waitFor(5, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            p.destroyForcibly();
            Thread.currentThread().interrupt();
        }
        children.forEach(h -> { if (h.isAlive()) h.destroyForcibly(); });
    }

    private static String javaLauncher() {
        var prop = System.getProperty(JAVA_PROP_NAME);
        if (prop != null && !prop.isBlank()) return prop;
        return ProcessHandle.current().info().command()
                .orElse(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    }

    private static int freePort() throws IOException {
        try (var s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            s.setReuseAddress(true);
            return s.getLocalPort();
        }
    }

    private static String tail(Path log) {
        try {
            List<String> lines = Files.readAllLines(log, StandardCharsets.UTF_8);
            return String.join("\n", lines.subList(Math.max(0, lines.size() - LOG_TAIL_LINES), lines.size()));
        } catch (IOException e) {
            return "<no log: " + e + ">";
        }
    }

    private static void sleepMillis(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static void deleteTree(Path root) {
        if (!Files.exists(root)) return;
        try (Stream<Path> walk = Files.walk(root)) {
            walk.sorted(Comparator.reverseOrder()).forEach(q -> {
                try {
                    Files.deleteIfExists(q);
                } catch (IOException ignored) {
                    // best effort: a temp folder left behind is harmless
                }
            });
        } catch (IOException ignored) {
            // best effort
        }
    }
}
