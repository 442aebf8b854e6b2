package dev.stoker.video.ffmpeg;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Every {@link AvField} offset and size, and every {@link AvField.Constant}, against the C headers: compiles a C
 * program with gcc against the libav*-dev headers that prints {@code offsetof}/{@code sizeof}, and compares.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class AvLayoutTest {
    @TempDir Path dir;

    @Test
    void everyFieldAndConstantMatchesTheHeaders() throws Exception {
        NativeTools.require(NativeTools.onPath("gcc"), "gcc", "gcc");
        NativeTools.require(Files.exists(Path.of("/usr/include/x86_64-linux-gnu/libavformat/avformat.h"))
                        || Files.exists(Path.of("/usr/include/libavformat/avformat.h")),
                "the FFmpeg headers", "libavformat-dev libavcodec-dev libavutil-dev libswscale-dev");
        StringBuilder c = new StringBuilder("""
                #include <stdio.h>
                #include <stddef.h>
                #include <errno.h>
                #include <libavformat/avformat.h>
                #include <libavformat/avio.h>
                #include <libavcodec/avcodec.h>
                #include <libavutil/log.h>
                #include <libavutil/frame.h>
                #include <libswscale/swscale.h>
                int main(void) {
                printf("versions %d %d %d\\n", LIBAVFORMAT_VERSION_MAJOR, LIBAVCODEC_VERSION_MAJOR, LIBAVUTIL_VERSION_MAJOR);
                """);
        Map<String, String> expected = new LinkedHashMap<>();
        var first = FfmpegVersions.SUPPORTED.getFirst();
        expected.put("versions", first.avformat() + " " + first.avcodec() + " " + first.avutil());
        for (AvField f : AvField.values()) {
            String key = f.struct + "." + f.field;
            c.append("printf(\"%s %zu %zu\\n\", \"").append(key).append("\", offsetof(").append(f.struct)
                    .append(", ").append(f.field).append("), sizeof(((").append(f.struct).append("*)0)->")
                    .append(f.field).append("));\n");
            expected.put(key, f.offset + " " + f.kind.sizeBytes);
        }
        for (AvField.Constant k : AvField.Constant.values()) {
            c.append("printf(\"%s %d\\n\", \"").append(k.name()).append("\", (int)(").append(k.cExpression)
                    .append("));\n");
            expected.put(k.name(), Integer.toString(k.value));
        }
        c.append("return 0; }\n");
        Files.writeString(dir.resolve("layout.c"), c);
        NativeTools.run(dir, List.of("gcc", "-w", "-o", "layout", "layout.c"));
        Map<String, String> actual = new LinkedHashMap<>();
        for (String line : NativeTools.run(dir, List.of("./layout")).split("\n")) {
            int sp = line.indexOf(' ');
            actual.put(line.substring(0, sp), line.substring(sp + 1));
        }
        List<String> differences = new ArrayList<>();
        expected.forEach((k, v) -> {
            if (!v.equals(actual.get(k))) differences.add(k + ": Java " + v + ", headers " + actual.get(k));
        });
        assertEquals(List.of(), differences, "Java layouts that differ from the installed FFmpeg headers");
    }
}
