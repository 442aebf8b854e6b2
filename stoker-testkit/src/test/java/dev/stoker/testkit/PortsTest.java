package dev.stoker.testkit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.util.HashSet;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** {@link Ports}: free loopback ports below the kernel's ephemeral range, never the same one twice in a JVM. */
@Timeout(30)
class PortsTest {
    @Test
    void portsAreFreeBelowTheEphemeralRangeAndNeverGivenTwice() throws Exception {
        int low = Ports.ephemeralLow();
        assertTrue(low > 1024, "read the range's first port: " + low);
        var seen = new HashSet<Integer>();
        for (int i = 0; i < 50; i++) {
            int port = Ports.free();
            assertTrue(port >= 20_000 && port < low, port + " not in 20000.." + (low - 1));
            assertTrue(seen.add(port), "given twice: " + port);
            try (var s = new ServerSocket(port, 1, InetAddress.getLoopbackAddress())) {
                assertEquals(port, s.getLocalPort(), "free when given");
            }
        }
    }
}
