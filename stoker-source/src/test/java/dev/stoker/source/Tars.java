package dev.stoker.source;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.apache.commons.compress.archivers.tar.TarArchiveEntry;
import org.apache.commons.compress.archivers.tar.TarArchiveOutputStream;

/** Tar shards for tests, written by Commons Compress (POSIX long names). */
final class Tars {
    private Tars() { }

    /** A member: a file's name and bytes, or a directory when {@code bytes} is null. */
    record Member(String name, byte[] bytes) {
        static Member text(String name, String text) { return new Member(name, text.getBytes(StandardCharsets.UTF_8)); }

        static Member dir(String name) { return new Member(name, null); }
    }

    static byte[] tar(List<Member> members) {
        var out = new ByteArrayOutputStream();
        try (var tar = new TarArchiveOutputStream(out, "UTF-8")) {
            tar.setLongFileMode(TarArchiveOutputStream.LONGFILE_POSIX);
            tar.setBigNumberMode(TarArchiveOutputStream.BIGNUMBER_POSIX);
            for (var m : members) {
                var e = new TarArchiveEntry(m.name());
                if (m.bytes() != null) e.setSize(m.bytes().length);
                tar.putArchiveEntry(e);
                if (m.bytes() != null) tar.write(m.bytes());
                tar.closeArchiveEntry();
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return out.toByteArray();
    }

    static Path write(Path file, List<Member> members) throws IOException {
        return Files.write(file, tar(members));
    }
}
