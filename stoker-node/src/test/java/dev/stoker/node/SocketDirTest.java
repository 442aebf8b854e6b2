package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The default socket folder (predictable under /tmp) is used only when it is this user's and no one else can write to it. */
@Timeout(30)
class SocketDirTest {
    @TempDir Path tmp;

    private Path dir(String name, String mode) throws Exception {
        Path d = Files.createDirectory(tmp.resolve(name));
        Files.setPosixFilePermissions(d, PosixFilePermissions.fromString(mode));
        return d;
    }

    @Test
    void aPrivateFolderIsUsedAndOthersAreRefused() throws Exception {
        Path mine = dir("mine", "rwx------");
        assertDoesNotThrow(() -> SocketDir.checkPrivate(mine));
        assertDoesNotThrow(() -> SocketDir.checkPrivate(dir("readable", "rwxr-xr-x")));
        for (String mode : new String[] {"rwxrwxrwx", "rwxrwx---", "rwx----wx"}) {
            Path open = dir("open-" + mode, mode);
            var e = assertThrows(ConfigException.class, () -> SocketDir.checkPrivate(open));
            assertTrue(e.getMessage().contains("(mode " + mode + ")") && e.getMessage().contains("a folder of your own"), e.getMessage());
        }
        Path link = Files.createSymbolicLink(tmp.resolve("link"), mine);
        assertThrows(ConfigException.class, () -> SocketDir.checkPrivate(link), "a link could point anywhere");
    }

    @Test
    void aGivenSocketIsHeldToTheRuleItsTrainersApply() throws Exception {
        Path mine = dir("given", "rwx------");
        assertEquals(mine.resolve("j.sock"), SocketDir.prepare(mine.resolve("j.sock"), "j"));
        Path made = tmp.resolve("new/sub/j.sock");
        assertEquals(made, SocketDir.prepare(made, "j"), "a missing folder is made 0700");
        assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(made.getParent())));
        Path open = dir("shared", "rwxrwxrwx"); // like /tmp (less its sticky bit)
        var e = assertThrows(ConfigException.class, () -> SocketDir.prepare(open.resolve("j.sock"), "j"));
        assertTrue(e.getMessage().contains(open.toString()) && e.getMessage().contains("trainers would refuse"), e.getMessage());
    }
}
