package dev.stoker.flight;

import static dev.stoker.flight.FlightBatchServerTest.assertSameTensors;
import static dev.stoker.flight.FlightBatchServerTest.tensors;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.flight.FlightBatchServerTest.Synthetic;
import dev.stoker.testkit.TestCertificate;
import dev.stoker.core.batch.BatchLayout;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.flight.Action;
import org.apache.arrow.flight.FlightCallHeaders;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.HeaderCallOption;
import org.apache.arrow.flight.Location;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Token and TLS on a real server on 127.0.0.1: who gets batches, who is refused, and what is never shown. */
@Timeout(60)
@SuppressWarnings("try") // Arrow's FlightClient and FlightStream declare close() throws InterruptedException / Exception
class FlightSecurityTest {
    static final String TOKEN = "s3cr3t-token-0123456789abcdef";
    static final Location ANY_PORT = FlightBatchServerTest.ANY_PORT;
    static final FlightBatchServer.Security TOKEN_ONLY = new FlightBatchServer.Security(TOKEN, null, null);
    static final int STEPS = 2;

    @TempDir Path tmp;

    private static FlightRuntimeException refused(FlightBatchClient client) {
        return assertThrows(FlightRuntimeException.class, () -> client.next(0, 1, "test"));
    }

    private static void assertUnauthenticated(FlightRuntimeException e, String says) {
        assertEquals(FlightStatusCode.UNAUTHENTICATED, e.status().code(), e.toString());
        assertTrue(e.status().description().contains(says), e.status().description());
        assertFalse(e.toString().contains(TOKEN), "a refusal never shows the token: " + e);
    }

    /** Every tensor's bytes of the rank's batches, to the end of its feed. */
    private static List<byte[][]> drain(FlightBatchClient client) {
        var batches = new ArrayList<byte[][]>();
        BatchLayout.Batch b;
        while ((b = client.next(0, 1, "test")) != null) {
            byte[][] bytes = new byte[b.tensors().size()][];
            for (int t = 0; t < bytes.length; t++) bytes[t] = b.tensors().get(t).data().toArray(ValueLayout.JAVA_BYTE);
            batches.add(bytes);
        }
        return batches;
    }

    /** What a trainer of a plain loopback server reads: the reference the secured servers must match. */
    private static List<byte[][]> plainBatches(BufferAllocator alloc) throws Exception {
        try (var source = new Synthetic(1, STEPS);
             var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, FlightBatchServer.Security.NONE);
             var client = FlightBatchClient.connect("127.0.0.1", server.port(), alloc)) {
            return drain(client);
        }
    }

    private static void assertSameBatches(List<byte[][]> expected, List<byte[][]> got) {
        assertEquals(expected.size(), got.size(), "batches");
        for (int s = 0; s < expected.size(); s++) {
            assertEquals(expected.get(s).length, got.get(s).length, "tensors of step " + s);
            for (int t = 0; t < expected.get(s).length; t++) assertArrayEquals(expected.get(s)[t], got.get(s)[t], "step " + s + " tensor " + t);
        }
    }

    @Test
    void withATokenOnlyCallsCarryingItGetBatches() throws Exception {
        try (var alloc = new RootAllocator()) {
            List<byte[][]> expected = plainBatches(alloc);
            assertEquals(STEPS, expected.size());
            try (var source = new Synthetic(1, STEPS);
                 var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, TOKEN_ONLY)) {
                try (var none = FlightBatchClient.connect("127.0.0.1", server.port(), alloc)) {
                    assertUnauthenticated(refused(none), "requires a token: send the header 'authorization: Bearer <token>'");
                }
                String wrong = TOKEN.substring(0, TOKEN.length() - 1) + "g"; // same length, last character differs
                try (var bad = FlightBatchClient.connect("127.0.0.1", server.port(), new FlightBatchClient.Options(wrong, false, null), alloc)) {
                    assertUnauthenticated(refused(bad), "wrong token");
                }
                try (var longer = FlightBatchClient.connect("127.0.0.1", server.port(), new FlightBatchClient.Options(TOKEN + "x", false, null), alloc)) {
                    assertUnauthenticated(refused(longer), "wrong token");
                }
                try (var raw = FlightClient.builder(alloc, Location.forGrpcInsecure("127.0.0.1", server.port())).build()) {
                    var basic = new FlightCallHeaders();
                    basic.insert("authorization", "Basic " + TOKEN);
                    var e = assertThrows(FlightRuntimeException.class, () -> {
                        try (FlightStream s = raw.getStream(FlightWire.ticket(0, 1, "test"), new HeaderCallOption(basic))) {
                            s.next();
                        }
                    });
                    assertUnauthenticated(e, "must be 'Bearer <token>'");
                    // Not only DoGet: a call the server does not implement is refused before it is looked at.
                    var action = assertThrows(FlightRuntimeException.class, () -> raw.doAction(new Action("anything")).hasNext());
                    assertUnauthenticated(action, "requires a token");
                }
                assertEquals(0, source.served[0].get(), "a refused caller takes no batch");
                try (var good = FlightBatchClient.connect("127.0.0.1", server.port(), new FlightBatchClient.Options(TOKEN, false, null), alloc)) {
                    assertSameBatches(expected, drain(good));
                }
            }
        }
    }

    @Test
    void aMessageLargerThanAnyCallNeedsIsRefusedBeforeItIsHeld() throws Exception {
        try (var alloc = new RootAllocator()) {
            List<byte[][]> expected = plainBatches(alloc);
            try (var source = new Synthetic(1, STEPS);
                 var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, TOKEN_ONLY);
                 var raw = FlightClient.builder(alloc, Location.forGrpcInsecure("127.0.0.1", server.port())).build()) {
                var headers = new FlightCallHeaders();
                headers.insert("authorization", "Bearer " + TOKEN);
                byte[] big = new byte[8 << 20]; // a caller with the token, sending an 8 MiB action body
                var e = assertThrows(FlightRuntimeException.class,
                        () -> raw.doAction(new Action("stoker.session.open", big), new HeaderCallOption(headers)).hasNext());
                assertEquals(FlightStatusCode.RESOURCE_EXHAUSTED, e.status().code(), e.toString());
                assertEquals(0, source.served[0].get(), "it took no batch");
                try (var good = FlightBatchClient.connect("127.0.0.1", server.port(), new FlightBatchClient.Options(TOKEN, false, null), alloc)) {
                    assertSameBatches(expected, drain(good));
                }
            }
        }
    }

    @Test
    void arrowsOwnClientSendsTheTokenAsACallHeader() throws Exception {
        try (var alloc = new RootAllocator();
             var source = new Synthetic(1, 1);
             var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, TOKEN_ONLY);
             var raw = FlightClient.builder(alloc, Location.forGrpcInsecure("127.0.0.1", server.port())).build()) {
            var headers = new FlightCallHeaders();
            headers.insert("authorization", "Bearer " + TOKEN); // what docs/protocol.md tells pyarrow users to send
            try (FlightStream s = raw.getStream(FlightWire.ticket(0, 1, "test"), new HeaderCallOption(headers))) {
                assertTrue(s.next());
                assertEquals(4, s.getRoot().getRowCount());
                assertEquals("[input_ids, pixel_values, mask, sample_index]", s.getRoot().getVector("name").toString());
            }
        }
    }

    @Test
    void tlsWithATokenDeliversTheSameBatches() throws Exception {
        var cert = TestCertificate.create(tmp);
        var security = new FlightBatchServer.Security(TOKEN, cert.certificate(), cert.privateKey());
        var trusting = new FlightBatchClient.Options(TOKEN, true, cert.certificate());
        try (var alloc = new RootAllocator()) {
            List<byte[][]> expected = plainBatches(alloc);
            try (var source = new Synthetic(1, STEPS);
                 var server = FlightBatchServer.start(Location.forGrpcTls("127.0.0.1", 0), source, null, alloc, security)) {
                try (var plaintext = FlightBatchClient.connect("127.0.0.1", server.port(), new FlightBatchClient.Options(TOKEN, false, null), alloc)) {
                    assertEquals(FlightStatusCode.UNAVAILABLE, refused(plaintext).status().code(), "no plaintext on a TLS port");
                }
                try (var untrusting = FlightBatchClient.connect("127.0.0.1", server.port(), new FlightBatchClient.Options(TOKEN, true, null), alloc)) {
                    var e = refused(untrusting);
                    assertEquals(FlightStatusCode.UNAVAILABLE, e.status().code(), "a self-signed certificate is not trusted by default: " + e);
                }
                try (var noToken = FlightBatchClient.connect("127.0.0.1", server.port(), new FlightBatchClient.Options(null, true, cert.certificate()), alloc)) {
                    assertUnauthenticated(refused(noToken), "requires a token");
                }
                assertEquals(0, source.served[0].get());
                try (var client = FlightBatchClient.connect("127.0.0.1", server.port(), trusting, alloc)) {
                    assertSameBatches(expected, drain(client));
                }
            }
        }
    }

    @Test
    void tlsWithoutATokenServesAnyTrustingClient() throws Exception {
        var cert = TestCertificate.create(tmp);
        try (var alloc = new RootAllocator();
             var source = new Synthetic(1, 1);
             var server = FlightBatchServer.start(Location.forGrpcTls("127.0.0.1", 0), source, null, alloc,
                     new FlightBatchServer.Security(null, cert.certificate(), cert.privateKey()));
             var client = FlightBatchClient.connect("127.0.0.1", server.port(), new FlightBatchClient.Options(null, true, cert.certificate()), alloc)) {
            assertSameTensors(tensors(0, 0), client.next(0, 1, "test"));
            assertNull(client.next(0, 1, "test"));
        }
    }

    @Test
    void badSettingsAreRefusedAndNeverShowTheToken() throws Exception {
        var shortToken = assertThrows(IllegalArgumentException.class, () -> new FlightBatchServer.Security("abc123", null, null));
        assertTrue(shortToken.getMessage().contains("at least 16"), shortToken.getMessage());
        assertFalse(shortToken.getMessage().contains("abc123"), shortToken.getMessage());
        var spaced = assertThrows(IllegalArgumentException.class, () -> new FlightBatchServer.Security("0123456789 abcdefgh", null, null));
        assertTrue(spaced.getMessage().contains("character 11"), spaced.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new FlightBatchServer.Security(TOKEN, tmp.resolve("cert.pem"), null));
        assertThrows(IllegalArgumentException.class, () -> new FlightBatchClient.Options(TOKEN, false, tmp.resolve("cert.pem")));
        var tls = new FlightBatchServer.Security(TOKEN, tmp.resolve("cert.pem"), tmp.resolve("key.pem"));
        try (var source = new Synthetic(1, 1)) {
            var mismatch = assertThrows(IllegalArgumentException.class, () -> FlightBatchServer.start(ANY_PORT, source, null, null, tls));
            assertTrue(mismatch.getMessage().contains("plaintext location"), mismatch.getMessage());
            assertThrows(IllegalArgumentException.class,
                    () -> FlightBatchServer.start(Location.forGrpcTls("127.0.0.1", 0), source, null, null, FlightBatchServer.Security.NONE));
        }
        for (Object o : List.of(TOKEN_ONLY, tls, new FlightBatchClient.Options(TOKEN, true, null))) {
            assertFalse(o.toString().contains(TOKEN), o.toString());
            assertTrue(o.toString().contains("token=****"), o.toString());
        }
    }
}
