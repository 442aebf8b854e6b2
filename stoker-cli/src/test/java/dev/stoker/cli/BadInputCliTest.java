package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.testkit.Vectors;
import java.awt.image.BufferedImage;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.zip.CRC32;
import javax.imageio.ImageIO;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Every bad input of the CLI contract: exit status 2, exactly one line on stderr naming the file or
 * sample and the cause; and in a data set the next sample still processes.
 */
@Timeout(60)
class BadInputCliTest {
    @TempDir Path tmp;
    Path photo;

    @BeforeEach
    void setUp() throws IOException {
        photo = tmp.resolve("photo.jpg");
        Files.copy(Vectors.get().inputImage("p01_photo_grace_hopper"), photo);
    }

    private static void assertInvalid(CliRunner r, String names, String cause) {
        assertEquals(2, r.status(), "exit status; stderr: " + r.err() + " stdout: " + r.out());
        String err = r.err().strip();
        assertEquals(1, err.lines().count(), "one line on stderr: " + err);
        assertTrue(err.contains(names), "names '" + names + "': " + err);
        assertTrue(err.toLowerCase().contains(cause.toLowerCase()), "says '" + cause + "': " + err);
    }

    private CliRunner preprocess(Path image) {
        return CliRunner.run("preprocess", "--processor", "qwen2-vl", "--image", image.toString(), "--out", tmp.resolve("out").toString());
    }

    private Path write(String name, byte[] bytes) throws IOException {
        return Files.write(tmp.resolve(name), bytes);
    }

    @Test
    void zeroByteImage() throws IOException {
        Path f = write("empty.jpg", new byte[0]);
        assertInvalid(preprocess(f), f.toString(), "empty");
    }

    @Test
    void truncatedJpeg() throws IOException {
        byte[] all = Files.readAllBytes(photo);
        Path f = write("truncated.jpg", Arrays.copyOf(all, all.length / 2));
        assertInvalid(preprocess(f), f.toString(), "");
        assertTrue(preprocess(f).err().toLowerCase().matches("(?s).*(truncat|premature|corrupt).*"), preprocess(f).err());
    }

    @Test
    void wrongExtensionIsDecodedByContent() throws IOException {
        Path png = Vectors.get().inputImage("p08_exact_448x448");
        Path f = write("actually-png.jpg", Files.readAllBytes(png));
        var r = preprocess(f);
        assertEquals(0, r.status(), r.err());
        var ref = preprocess(png);
        assertEquals(0, ref.status());
    }

    @Test
    void unsupportedFormat() throws IOException {
        Path f = write("notes.jpg", "this is not an image\n".getBytes(StandardCharsets.US_ASCII));
        assertInvalid(preprocess(f), f.toString(), "format");
        byte[] tiff = {'I', 'I', 42, 0, 8, 0, 0, 0, 0, 0};
        Path t = write("scan.tif", tiff);
        assertInvalid(preprocess(t), t.toString(), "format");
    }

    @Test
    void headerClaimingTooManyPixelsIsRefusedBeforeDecoding() throws IOException {
        Path f = write("bomb.png", pngHeaderOnly(100_000, 100_000));
        assertInvalid(preprocess(f), f.toString(), "pixels");
        var r = CliRunner.run("preprocess", "--processor", "qwen2-vl", "--max-source-pixels", "1000",
                "--image", photo.toString(), "--out", tmp.resolve("o").toString());
        assertInvalid(r, photo.toString(), "exceeds");
    }


    @Test
    void aspectRatioOver200() throws IOException {
        Path f = tmp.resolve("strip.png");
        ImageIO.write(new BufferedImage(6000, 29, BufferedImage.TYPE_3BYTE_BGR), "png", f.toFile());
        assertInvalid(preprocess(f), f.toString(), "aspect ratio");
    }

    @Test
    void missingImageFile() {
        Path f = tmp.resolve("nope.jpg");
        assertInvalid(preprocess(f), f.toString(), "no such file");
    }

    private CliRunner encode(String json) throws IOException {
        Path s = Files.write(tmp.resolve("sample.json"), json.getBytes(StandardCharsets.UTF_8));
        return CliRunner.run("encode", "--processor", "qwen2.5-vl", "--sample", s.toString(), "--out", tmp.resolve("out").toString());
    }

    @Test
    void invalidUtf8() throws IOException {
        byte[] bad = "{\"id\":\"s1\",\"conversations\":[{\"from\":\"human\",\"value\":\"caf\u00e9\"}]}".getBytes(StandardCharsets.UTF_8);
        int i = new String(bad, StandardCharsets.ISO_8859_1).indexOf("caf") + 3;
        bad[i] = (byte) 0xC3;
        bad[i + 1] = (byte) 0x28; // an invalid continuation byte
        Path s = Files.write(tmp.resolve("sample.json"), bad);
        var r = CliRunner.run("encode", "--processor", "qwen2.5-vl", "--sample", s.toString(), "--out", tmp.resolve("out").toString());
        assertInvalid(r, "sample.json", "utf-8");
    }

    @Test
    void placeholdersThatDoNotMatchImages() throws IOException {
        var r = encode("{\"id\":\"s2\",\"image\":[\"photo.jpg\",\"photo.jpg\"],\"conversations\":["
                + "{\"from\":\"human\",\"value\":\"<image>\\nWhat is it?\"},{\"from\":\"gpt\",\"value\":\"A woman.\"}]}");
        assertInvalid(r, "s2", "image");
        var r2 = encode("{\"id\":\"s3\",\"image\":\"photo.jpg\",\"conversations\":["
                + "{\"from\":\"human\",\"value\":\"<image><image>\\nWhat is it?\"},{\"from\":\"gpt\",\"value\":\"A woman.\"}]}");
        assertInvalid(r2, "s3", "image");
    }

    @Test
    void pathEscapingTheDatasetRoot() throws IOException {
        Path inner = Files.createDirectories(tmp.resolve("ds"));
        Path s = Files.writeString(inner.resolve("sample.json"), "{\"id\":\"s4\",\"image\":\"../photo.jpg\",\"conversations\":["
                + "{\"from\":\"human\",\"value\":\"<image>\\nWhat is it?\"},{\"from\":\"gpt\",\"value\":\"A woman.\"}]}");
        var r = CliRunner.run("encode", "--processor", "qwen2.5-vl", "--sample", s.toString(), "--out", tmp.resolve("out").toString());
        assertInvalid(r, "s4", "escapes");
        Files.createSymbolicLink(inner.resolve("link.jpg"), photo);
        Files.writeString(s, "{\"id\":\"s5\",\"image\":\"link.jpg\",\"conversations\":["
                + "{\"from\":\"human\",\"value\":\"<image>\\nWhat is it?\"},{\"from\":\"gpt\",\"value\":\"A woman.\"}]}");
        var r2 = CliRunner.run("encode", "--processor", "qwen2.5-vl", "--sample", s.toString(), "--out", tmp.resolve("out").toString());
        assertInvalid(r2, "s5", "symlink");
    }

    @Test
    void overLongSampleIsRejectedByDefaultAndTruncatedOnRequest() throws IOException {
        String json = "{\"id\":\"s6\",\"image\":\"photo.jpg\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\n"
                + "word ".repeat(600) + "\"},{\"from\":\"gpt\",\"value\":\"" + "answer ".repeat(300) + "\"}]}";
        Path s = Files.writeString(tmp.resolve("sample.json"), json);
        var r = CliRunner.run("encode", "--processor", "qwen2.5-vl", "--max-seq-len", "512", "--sample", s.toString(), "--out", tmp.resolve("o1").toString());
        assertInvalid(r, "s6", "512");
        var t = CliRunner.run("encode", "--processor", "qwen2.5-vl", "--max-seq-len", "512", "--truncation", "truncate",
                "--sample", s.toString(), "--out", tmp.resolve("o2").toString());
        assertEquals(0, t.status(), t.err());
        var ids = dev.stoker.core.Npy.read(tmp.resolve("o2/input_ids.npy")).asLongs();
        assertTrue(ids.length <= 512, "length " + ids.length);
        var grid = dev.stoker.core.Npy.read(tmp.resolve("o2/image_grid_thw.npy"));
        long pads = Arrays.stream(ids).filter(x -> x == 151655).count();
        long expectedPads = grid.shape()[0] == 0 ? 0 : grid.asLongs()[1] * grid.asLongs()[2] / 4;
        assertEquals(expectedPads, pads, "image token run kept whole or dropped with its pixels");
    }

    @Test
    void nextSampleStillProcessesInADataSet() throws IOException {
        Path ds = Files.createDirectories(tmp.resolve("ds"));
        Files.copy(photo, ds.resolve("good.jpg"));
        Files.write(ds.resolve("empty.jpg"), new byte[0]);
        String good = "{\"id\":\"g%d\",\"image\":\"good.jpg\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\nWhat?\"},{\"from\":\"gpt\",\"value\":\"A woman.\"}]}\n";
        String text = String.format(good, 1)
                + "{\"id\":\"b1\",\"image\":\"empty.jpg\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\nWhat?\"},{\"from\":\"gpt\",\"value\":\"x\"}]}\n"
                + "{not json\n"
                + "{\"id\":\"b3\",\"image\":\"missing.jpg\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\nWhat?\"},{\"from\":\"gpt\",\"value\":\"x\"}]}\n"
                + String.format(good, 2);
        Files.writeString(ds.resolve("train.jsonl"), text);
        var r = CliRunner.run("bench", "preprocess", "--data", ds.resolve("train.jsonl").toString(), "--threads", "2", "--warmup", "0");
        assertEquals(0, r.status(), r.err());
        var json = new com.fasterxml.jackson.databind.ObjectMapper().readTree(r.lastStdoutLine());
        assertEquals(2, json.get("samples").asInt(), r.out());
        assertEquals(3, json.get("errors").asInt(), r.out());
        assertTrue(json.get("samples_per_s").asDouble() > 0);
        assertTrue(json.has("mpix_per_s") && json.get("threads").asInt() == 2);
        assertTrue(r.out().contains("empty.jpg") && r.out().contains("train.jsonl:3") && r.out().contains("missing.jpg"), r.out());
    }

    /** A valid PNG signature and IHDR claiming {@code w}×{@code h}, and nothing else. */
    private static byte[] pngHeaderOnly(int w, int h) {
        var ihdr = ByteBuffer.allocate(17).put("IHDR".getBytes(StandardCharsets.US_ASCII)).putInt(w).putInt(h)
                .put((byte) 8).put((byte) 2).put((byte) 0).put((byte) 0).put((byte) 0).array();
        var crc = new CRC32();
        crc.update(ihdr);
        var out = new ByteArrayOutputStream();
        out.writeBytes(new byte[] {(byte) 0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'});
        out.writeBytes(ByteBuffer.allocate(4).putInt(13).array());
        out.writeBytes(ihdr);
        out.writeBytes(ByteBuffer.allocate(4).putInt((int) crc.getValue()).array());
        return out.toByteArray();
    }

    @Test
    void serveRefusesAShmBudgetBelowWhatARankNeedsAtStart() throws IOException {
        Path manifest = Files.writeString(tmp.resolve("train.jsonl"), "{\"id\":\"s0\",\"image\":\"photo.jpg\",\"conversations\":"
                + "[{\"from\":\"human\",\"value\":\"<image>\\nHi\"},{\"from\":\"gpt\",\"value\":\"Hello.\"}]}\n");
        var r = CliRunner.run("serve", "--data", manifest.toString(), "--batch", "8", "--max-pixels", "451584",
                "--shm-budget", "16M", "--shm-dir", tmp.toString(), "--socket", tmp.resolve("s.sock").toString());
        assertInvalid(r, "--shm-budget 16777216 gives each of the 1 ranks 16777216 bytes, and a rank needs",
                "its trainer may hold 2 batches while the next is filled");
        assertTrue(Files.notExists(tmp.resolve("s.sock")), "nothing started");
    }

    /**
     * Without --max-pixels the refusal names the values in force, never a raw key's null (the command of issue 28, which
     * once said "at --max-pixels null"). Where the configuration's worst case does not fit (issue 31, item 6), the data's
     * largest batch is what the budget is checked against, and the refusal names it and whence it came; the worst case's
     * wording with the processor's cap is ShmBudgetTest's.
     */
    @Test
    void theShmRefusalNamesTheValuesInForceWhereNoneWereGiven() throws IOException {
        Path manifest = Files.writeString(tmp.resolve("train.jsonl"), "{\"id\":\"s0\",\"image\":\"photo.jpg\",\"conversations\":"
                + "[{\"from\":\"human\",\"value\":\"<image>\\nHi\"},{\"from\":\"gpt\",\"value\":\"Hello.\"}]}\n");
        var r = CliRunner.run("serve", "--data", manifest.toString(), "--ranks", "1", "--batch", "4", "--shm-budget", "1M",
                "--shm-dir", tmp.toString(), "--socket", tmp.resolve("s.sock").toString());
        assertInvalid(r, "--shm-budget 1048576 gives each of the 1 ranks 1048576 bytes, and a rank needs",
                "its trainer may hold 2 batches while the next is filled");
        assertTrue(r.err().contains("the largest batch of this data set is ") && r.err().contains("(--batch 4 of its largest samples, ")
                && r.err().contains("shapes from a header scan of 1 records"), r.err());
        assertFalse((r.out() + r.err()).contains("null"), r.out() + r.err());
        assertTrue(Files.notExists(tmp.resolve("s.sock")), "nothing started");
    }
}
