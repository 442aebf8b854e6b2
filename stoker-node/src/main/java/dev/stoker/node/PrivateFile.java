package dev.stoker.node;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Collections;
import java.util.EnumSet;
import java.util.Set;

/**
 * Secrets kept in files only their user may open, read the one way: the Flight token files and the
 * cluster key. Such a file must be a regular file (a link is refused, not followed), owned by this
 * process's user, with no permission for group or others, and small; else it is refused with what to
 * fix, as ssh refuses such a key (a secret others can read is no secret).
 */
public final class PrivateFile {
    /** Group's and others' write bits: a folder without them is one no one else can change. */
    public static final Set<PosixFilePermission> OTHERS_WRITE = Set.of(PosixFilePermission.GROUP_WRITE, PosixFilePermission.OTHERS_WRITE);
    /** Every permission bit of group and others. */
    public static final Set<PosixFilePermission> OTHERS = Collections.unmodifiableSet(EnumSet.of(PosixFilePermission.GROUP_READ,
            PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.OTHERS_READ,
            PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE));

    private PrivateFile() {}

    /** This process's user id (from /proc/self). */
    public static int uid() {
        try {
            return (Integer) Files.getAttribute(Path.of("/proc/self"), "unix:uid");
        } catch (IOException | UnsupportedOperationException e) {
            throw new ConfigException("cannot tell this process's user id (/proc/self): " + e.getMessage());
        }
    }

    /**
     * The text of {@code file} (UTF-8), checked as above; errors begin with {@code what} and the path, and
     * the one for a file open to others ends with {@code fix} after "run chmod 600 FILE".
     *
     * @throws ConfigException naming the file and what is wrong; never holding its contents
     */
    public static String read(Path file, String what, long maxBytes, String fix) {
        try {
            var attrs = Files.readAttributes(file, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
            if (!attrs.isRegularFile()) throw new ConfigException(what + " " + file + " is not a regular file (a link or a folder?)");
            int owner = (Integer) Files.getAttribute(file, "unix:uid", LinkOption.NOFOLLOW_LINKS);
            if (owner != uid()) throw new ConfigException(what + " " + file + " belongs to another user (uid " + owner + ")");
            Set<PosixFilePermission> mode = Files.getPosixFilePermissions(file, LinkOption.NOFOLLOW_LINKS);
            if (!Collections.disjoint(mode, OTHERS))
                throw new ConfigException(what + " " + file + " is open to other users (mode " + PosixFilePermissions.toString(mode) + "); run chmod 600 "
                        + file + fix);
            if (attrs.size() > maxBytes) throw new ConfigException(what + " " + file + " has " + attrs.size() + " bytes, more than " + maxBytes);
            return Files.readString(file, StandardCharsets.UTF_8);
        } catch (NoSuchFileException e) {
            throw new ConfigException(what + " " + file + " does not exist");
        } catch (UnsupportedOperationException e) {
            throw new ConfigException(what + " " + file + ": its owner and permissions cannot be checked on this file system");
        } catch (IOException e) {
            throw new ConfigException("cannot read " + what + " " + file + ": " + e.getMessage());
        }
    }

    /**
     * Refuses {@code dir} unless it is a real folder (not a link) of this user without any of the
     * {@code forbidden} bits; errors begin with {@code what} and the path, and end with {@code fix}.
     */
    public static void checkFolder(Path dir, Set<PosixFilePermission> forbidden, String what, String fix) {
        try {
            if (!Files.isDirectory(dir, LinkOption.NOFOLLOW_LINKS)) throw new ConfigException(what + " " + dir + " is not a folder (a link?)" + fix);
            int owner = (Integer) Files.getAttribute(dir, "unix:uid", LinkOption.NOFOLLOW_LINKS);
            if (owner != uid()) throw new ConfigException(what + " " + dir + " belongs to another user (uid " + owner + ")" + fix);
            var mode = Files.getPosixFilePermissions(dir, LinkOption.NOFOLLOW_LINKS);
            if (!Collections.disjoint(mode, forbidden))
                throw new ConfigException(what + " " + dir + " is open to other users (mode "
                        + PosixFilePermissions.toString(mode) + "); run chmod 700 " + dir + fix);
        } catch (UnsupportedOperationException e) {
            throw new ConfigException(what + " " + dir + ": its owner and permissions cannot be checked on this file system");
        } catch (IOException e) {
            throw new ConfigException("cannot check " + what + " " + dir + ": " + e.getMessage());
        }
    }
}
