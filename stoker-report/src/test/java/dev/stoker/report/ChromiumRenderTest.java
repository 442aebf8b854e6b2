package dev.stoker.report;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Opens the report in headless Chromium (Debian {@code chromium}): it must render with no script
 * error and with every plot drawn. The screenshot is kept as {@code target/report-screenshot.png}.
 * Skipped where {@code /usr/bin/chromium} is absent.
 */
@Timeout(60)
@Tag("slow")
class ChromiumRenderTest {
    private static final Path CHROMIUM = Path.of("/usr/bin/chromium");
    private static final Pattern BODY = Pattern.compile("<body([^>]*)>");

    @Test
    void rendersWithoutScriptErrorsAndDrawsEveryPlot(@TempDir Path tmp) throws Exception {
        assumeTrue(Files.isExecutable(CHROMIUM), "chromium not installed (Debian package chromium)");
        Path run = tmp.resolve("run");
        SyntheticRun.write(run, 60, true, "evidence with <b>markup</b> & quotes \"");
        Path html = RunReport.write(run);

        String dom = chromium(tmp, "--dump-dom", html);
        String body = bodyAttributes(dom);
        assertEquals("false", attr(body, "data-errors"), "script errors: " + errors(dom));
        var plots = RunReport.plots(RunData.load(run));
        assertTrue(plots.contains(RunReport.PACK_PLOT), "the synthetic run has packed modes: " + plots);
        assertEquals(Integer.toString(plots.size()), attr(body, "data-plots-total"), body);
        assertEquals(Integer.toString(plots.size()), attr(body, "data-plots"), "plots drawn: " + body);
        for (String plot : plots) assertTrue(dom.contains("data-plot=\"" + plot + "\""), plot);

        Path png = tmp.resolve("report.png");
        chromium(tmp, "--screenshot=" + png, html);
        assertTrue(Files.size(png) > 10_000, "screenshot written");
        Path target = Path.of(System.getProperty("basedir", "."), "target");
        Files.createDirectories(target);
        Files.copy(png, target.resolve("report-screenshot.png"), StandardCopyOption.REPLACE_EXISTING);
        Files.copy(html, target.resolve("report-screenshot.html"), StandardCopyOption.REPLACE_EXISTING);
    }

    /** The check itself must see a script error when there is one. */
    @Test
    void aScriptErrorIsReported(@TempDir Path tmp) throws Exception {
        assumeTrue(Files.isExecutable(CHROMIUM), "chromium not installed (Debian package chromium)");
        Path run = tmp.resolve("run");
        SyntheticRun.write(run, 5, false, "");
        Path html = RunReport.write(run);
        Files.writeString(html, Files.readString(html).replace("</body>", "<script>noSuchFunction();</script></body>"));
        String dom = chromium(tmp, "--dump-dom", html);
        assertEquals("true", attr(bodyAttributes(dom), "data-errors"));
        assertTrue(errors(dom).contains("noSuchFunction"), errors(dom));
    }

    private static String chromium(Path tmp, String action, Path html) throws IOException, InterruptedException {
        Path profile = Files.createTempDirectory(tmp, "profile");
        Path out = Files.createTempFile(tmp, "chromium", ".out");
        List<String> cmd = new ArrayList<>(List.of(CHROMIUM.toString(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--user-data-dir=" + profile, "--window-size=1400,3400", action, html.toUri().toString()));
        Process p = new ProcessBuilder(cmd).redirectOutput(out.toFile()).redirectError(ProcessBuilder.Redirect.DISCARD).start();
        if (!p.waitFor(25, TimeUnit.SECONDS)) {
            p.descendants().forEach(ProcessHandle::destroyForcibly);
            p.destroyForcibly();
            throw new AssertionError("chromium did not finish in 25 s: " + cmd);
        }
        assertEquals(0, p.exitValue(), "chromium exit status");
        return Files.readString(out, StandardCharsets.UTF_8);
    }

    private static String bodyAttributes(String dom) {
        Matcher m = BODY.matcher(dom);
        assertTrue(m.find(), "no <body> in the dumped DOM");
        return m.group(1);
    }

    private static String attr(String attrs, String name) {
        Matcher m = Pattern.compile(name + "=\"([^\"]*)\"").matcher(attrs);
        return m.find() ? m.group(1) : null;
    }

    private static String errors(String dom) {
        Matcher m = Pattern.compile("<pre id=\"errors\"[^>]*>(.*?)</pre>", Pattern.DOTALL).matcher(dom);
        return m.find() ? m.group(1) : "";
    }
}
