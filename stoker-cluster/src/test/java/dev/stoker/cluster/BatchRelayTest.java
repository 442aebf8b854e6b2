package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.flight.FlightBatchClient;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The relay's object names, and what it refuses before connecting anywhere: a malformed name, or an owner that is not on a
 * member's host (a peer holding the Flight token must not make the coordinator's node connect elsewhere). That relayed
 * batches reach their ranks exactly as direct ones do is ClusterTest's.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class BatchRelayTest {
    @Test
    void aRelayedNameCarriesTheOwnersEndpointAndItsOwnKey() {
        String k = BatchRelay.key("10.0.0.2", 4711, "t12a0");
        assertEquals("relay~10.0.0.2:4711~t12a0", k);
        assertTrue(BatchRelay.relayed(k));
        assertEquals("t12a0", BatchRelay.ownKey(k));
        assertFalse(BatchRelay.relayed("t12a0"));
        assertEquals("t12a0", BatchRelay.ownKey("t12a0"));
        assertEquals("t1a0", BatchRelay.ownKey(BatchRelay.key("::1", 1, "t1a0")), "an IPv6 host");
    }

    @Test
    void malformedNamesAndStrangersAreRefusedWithoutConnecting() {
        try (var relay = new BatchRelay(FlightBatchClient.Options.PLAINTEXT, null, host -> host.equals("10.0.0.2"))) {
            for (String bad : new String[] {"relay~", "relay~~t1", "relay~10.0.0.2~t1", "relay~10.0.0.2:0~t1", "relay~10.0.0.2:99999~t1",
                    "relay~10.0.0.2:12a~t1", "relay~10.0.0.2:4711~", "relay~:4711~t1"}) {
                var e = assertThrows(IllegalArgumentException.class, () -> relay.fetch("job", bad), bad);
                assertTrue(e.getMessage().startsWith("malformed relayed object job/") || e.getMessage().contains("is not a member"),
                        bad + ": " + e.getMessage());
            }
            var e = assertThrows(IllegalArgumentException.class, () -> relay.fetch("job", BatchRelay.key("203.0.113.9", 4711, "t1a0")));
            assertEquals("relayed object job/relay~203.0.113.9:4711~t1a0: 203.0.113.9 is not a member of this cluster", e.getMessage());
        }
    }
}
