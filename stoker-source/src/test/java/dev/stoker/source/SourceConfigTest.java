package dev.stoker.source;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(60)
class SourceConfigTest {
    @Test
    void defaultsAreTheDocumentedOnes() {
        var c = SourceConfig.defaults();
        assertNull(c.endpointOverride());
        assertEquals("us-east-1", c.region());
        assertFalse(c.pathStyle());
        assertFalse(c.hasStaticCredentials());
        assertEquals(64, c.maxInFlight());
        assertEquals(10_000, c.requestTimeoutMillis());
        assertEquals(5, c.maxRetries());
        assertEquals(50, c.baseBackoffMillis());
        assertEquals(0, c.fetchLatencyMillis());
    }

    @Test
    void toStringNeverShowsTheSecretNorTheWholeKeyId() {
        var c = SourceConfig.builder().credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI-very-secret").build();
        assertTrue(c.toString().contains("static(key id ****MPLE, secret ****)"), c.toString());
        assertFalse(c.toString().contains("very-secret"), c.toString());
        assertFalse(c.toString().contains("AKIAIOSFODNN7"), c.toString());
        var shortId = SourceConfig.builder().credentials("AKID", "wJalrXUtnFEMI-very-secret").build();
        assertFalse(shortId.toString().contains("AKID"), shortId.toString());
    }

    @Test
    void anEndpointWithCredentialsInItIsRefusedWithoutEchoingThem() {
        for (String uri : List.of("http://minio:minio-secret@127.0.0.1:9000", "https://minio-secret@s3.example", "ftp://minio-secret@x")) {
            var e = assertThrows(IllegalArgumentException.class, () -> SourceConfig.builder().endpointOverride(URI.create(uri)).build());
            assertFalse(e.getMessage().contains("minio-secret"), e.getMessage());
        }
    }

    @Test
    void invalidSettingsAreRefused() {
        assertThrows(IllegalArgumentException.class, () -> SourceConfig.builder().maxInFlight(0).build());
        assertThrows(IllegalArgumentException.class, () -> SourceConfig.builder().credentials("key", null).build());
        assertThrows(IllegalArgumentException.class, () -> SourceConfig.builder().fetchLatencyMillis(-1).build());
        assertThrows(IllegalArgumentException.class, () -> SourceConfig.builder().requestTimeoutMillis(0).build());
        assertThrows(IllegalArgumentException.class, () -> SourceConfig.builder().baseBackoffMillis(100).maxBackoffMillis(10).build());
        assertThrows(IllegalArgumentException.class, () -> SourceConfig.builder().endpointOverride(URI.create("s3://x")).build());
        assertThrows(IllegalArgumentException.class, () -> SourceConfig.builder().region(" ").build());
    }

    @Test
    void toBuilderRoundTrips() {
        var c = SourceConfig.builder().endpointOverride(URI.create("http://127.0.0.1:9000")).pathStyle(true)
                .maxInFlight(7).fetchLatencyMillis(30).credentials("a", "b").build();
        assertEquals(c, c.toBuilder().build());
    }
}
