package dev.stoker.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The child JVM's class-data-sharing flags: which child writes an archive, which reads it, which gets none. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ChildJvmTest {
    @TempDir Path tmp;

    private Path jar(String name, int bytes) throws Exception {
        return Files.write(tmp.resolve(name), new byte[bytes]);
    }

    /** A finished archive: the magic the JVM writes last. */
    private static void finish(Path archive) throws Exception {
        Files.write(archive, ByteBuffer.allocate(64).order(ByteOrder.LITTLE_ENDIAN).putInt(ChildJvm.DYNAMIC_ARCHIVE_MAGIC).array());
    }

    private static String flag(List<String> flags, String prefix) {
        return flags.stream().filter(f -> f.startsWith(prefix)).findFirst().map(f -> f.substring(prefix.length())).orElse(null);
    }

    @Test
    void theFirstChildOfAKindWritesTheArchiveTheOthersReadItOnceItIsFinished() throws Exception {
        String cp = jar("a.jar", 10) + File.pathSeparator + jar("b.jar", 20);
        Path dir = tmp.resolve("cds");
        var writer = ChildJvm.archiveFlags(dir, "stoker-serve", true, cp);
        String archive = flag(writer, "-XX:ArchiveClassesAtExit=");
        assertTrue(archive != null && archive.startsWith(dir.resolve("stoker-serve-").toString()), writer.toString());
        assertTrue(writer.contains("-Xlog:cds=off"), "the JVM's own CDS messages would land in the child's output: " + writer);

        assertEquals(List.of(), ChildJvm.archiveFlags(dir, "stoker-serve", true, cp), "one writer: the others start without an archive");
        Files.write(Path.of(archive), new byte[64]); // being written: the header comes last
        assertEquals(List.of(), ChildJvm.archiveFlags(dir, "stoker-serve", true, cp), "an unfinished archive is not read");

        finish(Path.of(archive));
        var reader = ChildJvm.archiveFlags(dir, "stoker-serve", true, cp);
        assertEquals(archive, flag(reader, "-XX:SharedArchiveFile="), reader.toString());
        assertNull(flag(reader, "-XX:ArchiveClassesAtExit="));
    }

    @Test
    void aClaimWithoutAnArchiveLongAfterItWasMadeIsTakenOverOnce() throws Exception {
        String cp = jar("a.jar", 10).toString();
        Path dir = tmp.resolve("cds");
        String archive = flag(ChildJvm.archiveFlags(dir, "stoker-node", true, cp), "-XX:ArchiveClassesAtExit=");
        Path claim = Path.of(archive.replace(".jsa", ".claim"));
        assertTrue(Files.exists(claim));
        Files.setLastModifiedTime(claim, FileTime.from(Instant.now().minus(ChildJvm.STALE_CLAIM).minusSeconds(1))); // its writer was killed
        assertEquals(archive, flag(ChildJvm.archiveFlags(dir, "stoker-node", true, cp), "-XX:ArchiveClassesAtExit="));
        assertEquals(List.of(), ChildJvm.archiveFlags(dir, "stoker-node", true, cp), "taken over once");
    }

    @Test
    void aReadOnlyChildNeverWritesAndKindsAndClassPathsHaveArchivesOfTheirOwn() throws Exception {
        String cp = jar("a.jar", 10).toString();
        Path dir = tmp.resolve("cds");
        assertEquals(List.of(), ChildJvm.archiveFlags(dir, "stoker-serve", false, cp));
        String serve = flag(ChildJvm.archiveFlags(dir, "stoker-serve", true, cp), "-XX:ArchiveClassesAtExit=");
        String trainer = flag(ChildJvm.archiveFlags(dir, "stoker-trainer", true, cp), "-XX:ArchiveClassesAtExit=");
        assertNotEquals(serve, trainer);
        Files.write(Path.of(cp), new byte[11]); // the jar was rebuilt: the JVM would refuse the old archive
        String rebuilt = flag(ChildJvm.archiveFlags(dir, "stoker-serve", true, cp), "-XX:ArchiveClassesAtExit=");
        assertTrue(rebuilt != null && !rebuilt.equals(serve), rebuilt + " vs " + serve);
    }

    @Test
    void aClassPathWithAFolderOfClassesGetsNoArchive() throws Exception {
        Path classes = Files.createDirectories(tmp.resolve("classes/p"));
        Files.write(classes.resolve("A.class"), new byte[1]);
        Path empty = Files.createDirectories(tmp.resolve("empty"));
        String jar = jar("a.jar", 10).toString();
        assertNull(ChildJvm.classPathDigest(tmp.resolve("classes") + File.pathSeparator + jar), "the JVM cannot archive with it");
        assertEquals(List.of(), ChildJvm.archiveFlags(tmp.resolve("cds"), "stoker-serve", true, tmp.resolve("classes") + File.pathSeparator + jar));
        assertFalse(ChildJvm.archiveFlags(tmp.resolve("cds"), "stoker-serve", true, empty + File.pathSeparator + jar).isEmpty(),
                "an empty folder (a module without main classes) is no obstacle");
    }

    @Test
    void theKindIsTheMainClassAndTheCommandALaunchReadsTheServeArchive() {
        assertEquals("stoker-serve", ChildJvm.kind(ChildJvm.STOKER_MAIN, List.of("serve", "--data", "x")));
        assertEquals("stoker-serve", ChildJvm.kind(ChildJvm.STOKER_MAIN, List.of("launch", "--", "torchrun")));
        assertEquals("stoker-trainer", ChildJvm.kind(ChildJvm.STOKER_MAIN, List.of("trainer")));
        assertEquals("stoker", ChildJvm.kind(ChildJvm.STOKER_MAIN, List.of()));
        assertEquals("simulatedtrainer", ChildJvm.kind("dev.stoker.bench.trainer.SimulatedTrainer", List.of("x")));
    }
}
