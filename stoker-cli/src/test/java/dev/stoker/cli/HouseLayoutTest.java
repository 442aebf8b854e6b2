package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.testkit.Vectors;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The floor plan the README's module table promises (issue 28), held against the sources so that it stays true as
 * features land: no module but {@code stoker-bench} holds more than 12% of the main Java lines, {@code stoker-pipeline}
 * no more than 5,500; {@code stoker-plan} imports nothing of Stoker but {@code stoker-core} (its functions are pure: seed,
 * sizes, weights, shapes and budgets in, order and packs out); the command line stays a parser (no class of
 * {@code stoker-cli} over 300 lines). Maven's dependencies already keep imports from running back up between modules;
 * what they cannot see is a module growing into the house's biggest room, which is what happened before.
 *
 * <p>Lines are {@code wc -l}'s: every line of every {@code stoker-*}/src/main/**&#47;*.java file.
 */
@Timeout(60)
class HouseLayoutTest {
    static final double MAX_SHARE = 0.12;
    static final long MAX_PIPELINE_LINES = 5_500;
    static final long MAX_CLI_CLASS_LINES = 300;
    private static final Pattern STOKER_NAME = Pattern.compile("\\bdev\\.stoker\\.([a-z]+)\\b");

    static Path root() { return Vectors.projectDir(); }

    /** Each module's main Java files. */
    static Map<String, List<Path>> mainSources() throws IOException {
        var out = new TreeMap<String, List<Path>>();
        try (Stream<Path> modules = Files.list(root())) {
            for (Path m : modules.filter(p -> p.getFileName().toString().startsWith("stoker-")).toList()) {
                Path src = m.resolve("src/main/java");
                if (!Files.isDirectory(src)) continue;
                try (Stream<Path> files = Files.walk(src)) {
                    out.put(m.getFileName().toString(), files.filter(f -> f.toString().endsWith(".java")).sorted().toList());
                }
            }
        }
        return out;
    }

    static long lines(Path file) throws IOException {
        try (Stream<String> s = Files.lines(file)) {
            return s.count();
        }
    }

    @Test
    void noModuleButTheBenchmarksHoldsMoreThanAnEighthOfTheCode() throws IOException {
        var sources = mainSources();
        assertTrue(sources.containsKey("stoker-plan") && sources.containsKey("stoker-encode") && sources.containsKey("stoker-pipeline"),
                "the modules of the data path: " + sources.keySet());
        var perModule = new TreeMap<String, Long>();
        long total = 0;
        for (var e : sources.entrySet()) {
            long n = 0;
            for (Path f : e.getValue()) n += lines(f);
            perModule.put(e.getKey(), n);
            total += n;
        }
        var table = new StringBuilder();
        for (var e : perModule.entrySet())
            table.append(String.format(java.util.Locale.ROOT, "%n  %-22s %6d lines  %5.1f%%", e.getKey(), e.getValue(), 100.0 * e.getValue() / total));
        for (var e : perModule.entrySet()) {
            if (e.getKey().equals("stoker-bench")) continue;
            assertTrue(e.getValue() <= MAX_SHARE * total, e.getKey() + " holds more than " + (int) (MAX_SHARE * 100)
                    + "% of the main Java lines (" + total + "):" + table);
        }
        assertTrue(perModule.get("stoker-pipeline") <= MAX_PIPELINE_LINES, "stoker-pipeline is over " + MAX_PIPELINE_LINES + " lines:" + table);
    }

    @Test
    void thePlanImportsNothingOfStokerButCore() throws IOException {
        var offenders = new ArrayList<String>();
        for (Path f : mainSources().get("stoker-plan")) {
            var m = STOKER_NAME.matcher(Files.readString(f));
            while (m.find()) {
                String floor = m.group(1);
                if (!floor.equals("core") && !floor.equals("plan")) offenders.add(root().relativize(f) + ": dev.stoker." + floor);
            }
        }
        assertEquals(List.of(), offenders, "stoker-plan must depend on stoker-core alone");
        String pom = Files.readString(root().resolve("stoker-plan/pom.xml"));
        var deps = Pattern.compile("<artifactId>(stoker-[a-z]+)</artifactId>").matcher(pom).results().map(r -> r.group(1))
                .filter(a -> !a.equals("stoker-plan") && !a.equals("stoker-parent")).toList();
        assertEquals(List.of("stoker-core"), deps, "stoker-plan's Stoker dependencies");
    }

    @Test
    void theCommandLineIsAParser() throws IOException {
        var big = new ArrayList<String>();
        for (Path f : mainSources().get("stoker-cli")) {
            long n = lines(f);
            if (n > MAX_CLI_CLASS_LINES) big.add(f.getFileName() + " " + n);
        }
        assertEquals(List.of(), big, "stoker-cli classes over " + MAX_CLI_CLASS_LINES + " lines: parsing belongs here, the work beside the node");
    }
}
