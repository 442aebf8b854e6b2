package dev.stoker.bench;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The command line of a child JVM, written once for every harness that starts one (the trainers and
 * services of the benchmarks, the system tests' services): this JVM's {@code java}, the flags every
 * JVM of the project runs with (the parent pom's {@code stoker.jvm.flags}, carried in a resource),
 * the caller's own JVM options, this JVM's class path, then the main class and its arguments.
 */
public final class ChildJvm {
    /** The product's entry point: {@code stoker ARGS}. */
    public static final String STOKER_MAIN = "dev.stoker.cli.Main";
    private static final List<String> FLAGS = readFlags();

    private ChildJvm() {}

    /** The project's JVM flags (native access, the NIO opens, offline DJL, headless AWT). */
    public static List<String> flags() { return FLAGS; }

    /** {@code java FLAGS jvmArgs -cp CLASSPATH mainClass args}. */
    public static List<String> command(List<String> jvmArgs, String mainClass, List<String> args) {
        var cmd = new ArrayList<String>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(FLAGS);
        cmd.addAll(jvmArgs);
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), mainClass));
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
