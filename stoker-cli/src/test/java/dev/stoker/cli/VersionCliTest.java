package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.stoker.testkit.Vectors;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The release version is defined once ({@code .mvn/maven.config}, {@code -Drevision=X.Y.Z}): {@code stoker --version}
 * and the Python client's {@code stoker.__version__} (run from the source tree) both say that one version.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class VersionCliTest {
    static final Pattern REVISION = Pattern.compile("(?:^|\\s)-Drevision=(\\S+)");

    @TempDir Path tmp;

    static String definedVersion() throws Exception {
        Path config = Vectors.projectDir().resolve(".mvn/maven.config");
        Matcher m = REVISION.matcher(Files.readString(config));
        assertTrue(m.find(), "no -Drevision= in " + config);
        String v = m.group(1);
        assertTrue(v.matches("\\d+\\.\\d+\\.\\d+"), "the release version '" + v + "' is not MAJOR.MINOR.PATCH");
        return v;
    }

    @Test
    void versionOptionPrintsTheDefinedVersionExactly() throws Exception {
        var r = CliRunner.run("--version");
        assertEquals(0, r.status(), r.err());
        assertEquals("stoker " + definedVersion() + System.lineSeparator(), r.out());
        assertEquals("", r.err());
    }

    @Test
    void everySubcommandsVersionOptionPrintsItToo() throws Exception {
        for (String[] args : new String[][] {{"serve", "--version"}, {"bench", "ladder", "--version"}, {"encode", "--version"}}) {
            var r = CliRunner.run(args);
            assertEquals(0, r.status(), String.join(" ", args) + ": " + r.err());
            assertEquals("stoker " + definedVersion() + System.lineSeparator(), r.out(), String.join(" ", args));
        }
    }

    @Test
    void pythonClientFromTheSourceTreeHasTheSameVersion() throws Exception {
        Path python = Path.of("/usr/bin/python3");
        assumeTrue(Files.isExecutable(python), python + " is missing");
        var pb = new ProcessBuilder(python.toString(), "-c",
                "import sys, stoker; sys.stdout.write(stoker.__version__)").directory(tmp.toFile()).redirectErrorStream(true);
        pb.environment().put("PYTHONPATH", Vectors.projectDir().resolve("clients/python").toString());
        pb.environment().put("PYTHONDONTWRITEBYTECODE", "1");
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(30, TimeUnit.SECONDS));
        assumeTrue(!(p.exitValue() != 0 && out.contains("No module named 'numpy'")), "no numpy: apt-get install python3-numpy");
        assertEquals(0, p.exitValue(), out);
        assertEquals(definedVersion(), out);
    }
}
