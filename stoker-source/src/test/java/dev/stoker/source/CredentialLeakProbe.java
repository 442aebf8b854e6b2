package dev.stoker.source;

import com.sun.net.httpserver.HttpServer;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;

/**
 * Run by {@link CredentialLeakTest} in a JVM of its own with every logger at TRACE: drives the
 * paths that print or log a source's configuration or its failures, with known fake credentials,
 * and prints what each produced. The test then searches the whole output for the credentials.
 */
public final class CredentialLeakProbe {
    static final String KEY_ID = "AKIAPROBEKEYID7Q2XWZ";
    static final String SECRET = "probe-secret-9f8e7d6c5b4a39281706";
    static final String BUCKET = "leak-probe";

    private CredentialLeakProbe() { }

    public static void main(String[] args) throws Exception {
        PrintStream out = System.out;
        int closedPort;
        try (var s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            closedPort = s.getLocalPort();
        }
        // A server that answers every request as S3 does a bad signature: 403 whose body names the key id.
        HttpServer denying = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        denying.createContext("/", exchange -> {
            byte[] body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch</Code><Message>The request "
                    + "signature we calculated does not match the signature you provided.</Message><AWSAccessKeyId>" + KEY_ID
                    + "</AWSAccessKeyId><RequestId>probe</RequestId></Error>").getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().set("Content-Type", "application/xml");
            exchange.sendResponseHeaders(403, body.length);
            try (exchange) {
                exchange.getResponseBody().write(body);
            }
        });
        denying.start();
        try {
            for (int port : new int[] {closedPort, denying.getAddress().getPort()}) {
                var config = SourceConfig.builder().endpointOverride(URI.create("http://127.0.0.1:" + port)).pathStyle(true)
                        .credentials(KEY_ID, SECRET).maxRetries(1).baseBackoffMillis(1).maxBackoffMillis(1).requestTimeoutMillis(5000).build();
                out.println("config: " + config);
                try (var source = ObjectSources.open("s3://" + BUCKET + "/ds/train.jsonl", config)) {
                    try {
                        source.fetch("probe-sample", "a.png").get(30, TimeUnit.SECONDS);
                        out.println("unexpected: the fetch succeeded");
                    } catch (java.util.concurrent.ExecutionException | CompletionException e) {
                        Throwable cause = e.getCause();
                        out.println("failure: " + cause);
                        cause.printStackTrace(out);
                    }
                }
            }
        } finally {
            denying.stop(0);
        }
        out.println("probe done");
        out.flush();
    }
}
