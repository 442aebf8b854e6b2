package dev.stoker.bench;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;

/**
 * The command line of a child JVM, written once for every harness that starts one (the trainers and
 * services of the benchmarks, the system tests' services): this JVM's {@code java}, the flags every
 * JVM of the project runs with (the parent pom's {@code stoker.jvm.flags}, carried in a resource),
 * the caller's own JVM options, the class path, then the main class and its arguments.
 *
 * <p>The class path is this JVM's, or {@value #CLASS_PATH_PROP_NAME} where that is set: the system tests
 * give their children the product's jars (the class path {@code ./stoker} runs with), not their own test
 * classes. {@value #CDS_DIR_PROP_NAME} (a folder) asks for a class-data-sharing archive per kind of child
 * (its main class and command), so that the tests' many child JVMs load their classes from a mapped archive
 * instead of parsing and verifying them at every start; see {@link #archiveFlags}.
 */
public final class ChildJvm {
    /** The product's entry point: {@code stoker ARGS}. */
    public static final String STOKER_MAIN = "dev.stoker.cli.Main";
    /** The class path of child JVMs, when it is not this JVM's. */
    public static final String CLASS_PATH_PROP_NAME = "stoker.child.classpath";
    /** The folder of the children's class-data-sharing archives; unset: none. */
    public static final String CDS_DIR_PROP_NAME = "stoker.child.cds";
    private static final String LAUNCH = "launch";
    /** The first bytes of a dynamic CDS archive (0xf00baba8, little-endian), written last, so a finished archive has them. */
    static final int DYNAMIC_ARCHIVE_MAGIC = 0xf00baba8;
    /** A writer that has not written its archive after this long died without (a SIGKILL): another child may write it. */
    static final Duration STALE_CLAIM = Duration.ofMinutes(10);
    /** The JVM logs why it cannot map an archive to stdout: a child's output is what the tests read. */
    private static final List<String> QUIET_CDS = List.of("-Xlog:cds=off", "-Xlog:cds+dynamic=off");
    private static final List<String> FLAGS = readFlags();

    private ChildJvm() {}

    /** The project's JVM flags (native access, the NIO opens, offline DJL, headless AWT). */
    public static List<String> flags() { return FLAGS; }

    /** {@code java FLAGS [archive flags] jvmArgs -cp CLASSPATH mainClass args}. */
    public static List<String> command(List<String> jvmArgs, String mainClass, List<String> args) {
        String classPath = System.getProperty(CLASS_PATH_PROP_NAME, "");
        if (classPath.isBlank()) classPath = System.getProperty("java.class.path");
        var cmd = new ArrayList<String>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(FLAGS);
        String cds = System.getProperty(CDS_DIR_PROP_NAME, "");
        if (!cds.isBlank()) {
            boolean launch = mainClass.equals(STOKER_MAIN) && !args.isEmpty() && args.getFirst().equals(LAUNCH);
            cmd.addAll(archiveFlags(Path.of(cds), kind(mainClass, args), !launch, classPath));
        }
        cmd.addAll(jvmArgs);
        cmd.addAll(List.of("-cp", classPath, mainClass));
        cmd.addAll(args);
        return cmd;
    }

    /** {@code stoker args} in a child JVM with {@code jvmArgs} (e.g. {@code -Xmx1g}). */
    public static List<String> stoker(List<String> jvmArgs, List<String> args) { return command(jvmArgs, STOKER_MAIN, args); }

    /** The words of an environment variable the launcher also passes to the JVM ({@code STOKER_HEAP_OPTS}, {@code STOKER_JAVA_OPTS}). */
    public static List<String> envOptions(String name) {
        String v = System.getenv(name);
        return v == null || v.isBlank() ? List.of() : Arrays.asList(v.trim().split("\\s+"));
    }

    /**
     * The kind of child an archive is for: {@code stoker serve} loads other classes than {@code stoker trainer}. A
     * {@code stoker launch} passes its JVM options on to the service it starts, so it reads the {@code serve} archive,
     * which fits both, and never writes one: its service would write the same file.
     */
    static String kind(String mainClass, List<String> args) {
        if (!mainClass.equals(STOKER_MAIN)) return mainClass.substring(mainClass.lastIndexOf('.') + 1).toLowerCase(Locale.ROOT);
        String command = args.isEmpty() ? "" : args.getFirst().replaceAll("[^A-Za-z0-9]", "");
        if (command.equals(LAUNCH)) return "stoker-serve";
        return command.isEmpty() ? "stoker" : "stoker-" + command;
    }

    /**
     * The flags that give a child of {@code kind} the archive of its classes in {@code dir}, or none.
     *
     * <p>Why it is done this way: the JVM maps a dynamic archive only with the class path it was written with (the jars'
     * sizes and times included) and cannot write one while a non-empty folder is on the class path, so the archive's
     * name holds a digest of the class path, and a class path with a folder of classes on it gets no archive. Of the
     * children of one kind, exactly one writes the archive ({@code -XX:ArchiveClassesAtExit}, when it exits): it claims
     * the name by creating {@code NAME.claim}, because two JVMs writing one file at once can leave a file of both, which
     * the JVM would map. The others read it ({@code -XX:SharedArchiveFile}) once it is complete, which its first bytes
     * tell (the JVM writes the header last), and start without it until then. A claim older than {@link #STALE_CLAIM}
     * without an archive was a writer that was killed; the next child claims it again. {@code mayWrite} false: the
     * child only reads.
     */
    static List<String> archiveFlags(Path dir, String kind, boolean mayWrite, String classPath) {
        try {
            String digest = classPathDigest(classPath);
            if (digest == null) return List.of();
            Files.createDirectories(dir);
            Path archive = dir.resolve(kind + "-" + digest + ".jsa"), claim = dir.resolve(kind + "-" + digest + ".claim");
            if (complete(archive)) return concat(List.of("-XX:SharedArchiveFile=" + archive), QUIET_CDS);
            if (!mayWrite || !claim(claim)) return List.of();
            return concat(List.of("-XX:ArchiveClassesAtExit=" + archive), QUIET_CDS);
        } catch (IOException e) {
            return List.of(); // no archive: the child starts as it would without one
        }
    }

    /** True when this caller may write the archive: it made {@code claim}, or took over one a killed writer left. */
    private static boolean claim(Path claim) throws IOException {
        try {
            Files.createFile(claim);
            return true;
        } catch (FileAlreadyExistsException held) {
            if (Files.getLastModifiedTime(claim).toInstant().isAfter(Instant.now().minus(STALE_CLAIM))) return false;
        }
        // stale: of the callers that find it so, the one whose move succeeds claims it anew
        Path taken = claim.resolveSibling(claim.getFileName() + "." + ProcessHandle.current().pid() + "." + System.nanoTime());
        try {
            Files.move(claim, taken, StandardCopyOption.ATOMIC_MOVE);
            Files.delete(taken);
            Files.createFile(claim);
            return true;
        } catch (NoSuchFileException | FileAlreadyExistsException another) {
            return false;
        }
    }

    /**
     * A digest of what the JVM checks an archive against (this JVM, every class path entry and each jar's size and time),
     * or null when the class path holds a folder with files in it, which the JVM cannot archive.
     */
    static String classPathDigest(String classPath) throws IOException {
        MessageDigest md;
        try {
            md = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        md.update((System.getProperty("java.home") + "\n" + System.getProperty("java.vm.version") + "\n").getBytes(StandardCharsets.UTF_8));
        for (String entry : classPath.split(File.pathSeparator)) {
            if (entry.isEmpty()) continue;
            Path p = Path.of(entry);
            if (Files.isDirectory(p)) {
                try (var files = Files.list(p)) {
                    if (files.findAny().isPresent()) return null;
                }
            }
            String stamp = Files.isRegularFile(p) ? Files.size(p) + " " + Files.getLastModifiedTime(p).toMillis() : "-";
            md.update((entry + " " + stamp + "\n").getBytes(StandardCharsets.UTF_8));
        }
        return HexFormat.of().formatHex(md.digest(), 0, 8);
    }

    /** True when {@code archive} starts with the archive magic, which the JVM writes last. */
    static boolean complete(Path archive) {
        if (!Files.isRegularFile(archive)) return false;
        try (var ch = FileChannel.open(archive)) {
            var head = ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN);
            while (head.hasRemaining() && ch.read(head) >= 0) {
                // reads the first four bytes
            }
            return !head.hasRemaining() && head.getInt(0) == DYNAMIC_ARCHIVE_MAGIC;
        } catch (IOException e) {
            return false;
        }
    }

    private static List<String> concat(List<String> a, List<String> b) {
        var out = new ArrayList<>(a);
        out.addAll(b);
        return out;
    }

    private static List<String> readFlags() {
        try (InputStream in = ChildJvm.class.getResourceAsStream("jvm.flags")) {
            if (in == null) throw new IllegalStateException("jvm.flags missing from the stoker-bench jar");
            String text = new String(in.readAllBytes(), StandardCharsets.UTF_8).strip();
            if (text.contains("${")) throw new IllegalStateException("jvm.flags was not filtered by the build: " + text);
            return List.copyOf(Arrays.stream(text.split("\\s+")).filter(s -> !s.isEmpty()).toList());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
