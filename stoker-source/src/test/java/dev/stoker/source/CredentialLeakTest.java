package dev.stoker.source;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Static S3 credentials never appear in what a source prints or logs: its configuration, the debug
 * line that opens it, and the messages and stack traces of a failed fetch (connection refused on a
 * closed port of 127.0.0.1, and a 403 whose body names the key id, as S3's SignatureDoesNotMatch
 * does). {@link CredentialLeakProbe} runs in a JVM of its own because this one's logging level is
 * fixed (warn) once the first logger exists; there every logger is at TRACE.
 */
@Timeout(120)
@Tag("slow")
class CredentialLeakTest {
    /** What {@code stoker} (dev.stoker.cli.Main) sets unless told otherwise: no wire dump of requests. */
    static final String NO_WIRE_DUMP = "-Dorg.slf4j.simpleLogger.log.io.netty.handler.logging.LoggingHandler=info";

    @TempDir Path tmp;

    private String probe(String name, String... flags) throws Exception {
        Path log = tmp.resolve(name + ".log");
        var cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "--sun-misc-unsafe-memory-access=allow", "-Dorg.slf4j.simpleLogger.defaultLogLevel=trace"));
        cmd.addAll(List.of(flags));
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), CredentialLeakProbe.class.getName()));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        assertTrue(p.waitFor(90, TimeUnit.SECONDS), "probe finished");
        String text = Files.readString(log);
        assertEquals(0, p.exitValue(), text);
        // The paths ran, with logging on:
        assertTrue(text.contains("probe done"), text);
        assertTrue(text.contains("DEBUG dev.stoker.source.ObjectSources - opened S3ObjectSource[s3://leak-probe/ds/] with SourceConfig["), text);
        assertTrue(text.contains("credentials=static(key id ****2XWZ, secret ****)"), text);
        assertTrue(text.contains("cannot fetch s3://leak-probe/ds/a.png after 1 retry"), text);
        assertTrue(text.contains("access denied: s3://leak-probe/ds/a.png (HTTP 403 SignatureDoesNotMatch)"), text);
        assertFalse(text.contains(CredentialLeakProbe.SECRET), "the secret key leaked:\n" + excerpt(text, CredentialLeakProbe.SECRET));
        return text;
    }

    @Test
    void theSecretNeverShowsEvenInAWireDump() throws Exception {
        String text = probe("wire");
        // With Netty's wire dump on (everything at TRACE), the key id shows only where it is sent: in the
        // Authorization header of the requests dumped (its signature is an HMAC, not the secret).
        int keyIds = count(text, Pattern.quote(CredentialLeakProbe.KEY_ID));
        assertTrue(keyIds > 0, "the wire dump was on");
        assertEquals(count(text, "Authorization: AWS4-HMAC-SHA256 Credential=" + CredentialLeakProbe.KEY_ID + "/"), keyIds,
                "the key id appears outside the requests' own header:\n" + text);
    }

    @Test
    void withStokersLoggingNeitherTheSecretNorTheKeyIdShows() throws Exception {
        String text = probe("stoker", NO_WIRE_DUMP);
        assertFalse(text.contains(CredentialLeakProbe.KEY_ID), "the key id leaked:\n" + excerpt(text, CredentialLeakProbe.KEY_ID));
    }

    private static int count(String text, String regex) { return (int) Pattern.compile(regex).matcher(text).results().count(); }

    /** The lines around the first occurrence of {@code what}. */
    private static String excerpt(String text, String what) {
        int i = text.indexOf(what);
        return i < 0 ? "" : text.substring(Math.max(0, i - 600), Math.min(text.length(), i + 200));
    }
}
