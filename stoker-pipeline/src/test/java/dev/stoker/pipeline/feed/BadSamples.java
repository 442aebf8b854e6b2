package dev.stoker.pipeline.feed;

import dev.stoker.core.SampleException.Stage;
import dev.stoker.testkit.Vectors;
import java.awt.image.BufferedImage;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Map;
import javax.imageio.ImageIO;

/**
 * Data sets with every kind of bad sample of the bad-input policy, mixed with good ones: what each
 * bad line looks like, and what the feed must say about it (stage and a piece of the cause).
 */
final class BadSamples {
    /** Token limit the data sets are fed with: good samples fit, {@link Kind#TOO_MANY_TOKENS} does not. */
    static final int MAX_SEQ_LEN = 1024;
    /** Images a sample may have: good samples have at most one, {@link Kind#TOO_MANY_IMAGES} has two. */
    static final int MAX_IMAGES = 1;

    /**
     * A kind of bad sample, the stage that must refuse it and words its cause must contain (case-insensitive); the
     * last two are sound samples a limit filters, not errors.
     */
    enum Kind {
        MISSING(Stage.FETCH, "not found"),
        TRUNCATED_JPEG(Stage.DECODE, "premature end of"),
        CORRUPT_JPEG(Stage.DECODE, "huffman"),
        CORRUPT_PNG(Stage.DECODE, "png"),
        TEXT_NAMED_JPG(Stage.DECODE, "unknown image format"),
        TIFF(Stage.DECODE, "unsupported format: tiff"),
        EMPTY_FILE(Stage.DECODE, "empty file"),
        DECOMPRESSION_BOMB(Stage.DECODE, "exceeds the limit"),
        /** A real, valid 13000x13000 PNG of 0.5 MB: under the pixel limit, about 1 GB to decode (audit #10). */
        MEMORY_BOMB(Stage.DECODE, "over the decode memory budget"),
        /**
         * A small BMP whose decoding throws OutOfMemoryError: only with {@link OutOfMemoryBmpReader} installed (not in
         * {@code everyKind}).
         */
        OUT_OF_MEMORY(Stage.DECODE, "out of memory"),
        TOO_ELONGATED(Stage.TRANSFORM, "aspect ratio must be smaller than 200"),
        BAD_JSON(Stage.MANIFEST, "malformed json"),
        MISSING_CONVERSATIONS(Stage.MANIFEST, "missing field 'conversations'"),
        MISTYPED_IMAGE(Stage.MANIFEST, "field 'image': expected a string or an array of strings, got number"),
        MISTYPED_TURN(Stage.MANIFEST, "conversations[0].value: expected a string, got number"),
        INVALID_UTF8(Stage.MANIFEST, "invalid utf-8 at byte"),
        PATH_ESCAPE(Stage.FETCH, "escapes the data set root"),
        SYMLINK_ESCAPE(Stage.FETCH, "through a symlink"),
        TOO_MANY_TOKENS(Stage.TOKENIZE, "over the limit of " + MAX_SEQ_LEN),
        TOO_MANY_IMAGES(Stage.MANIFEST, "more than --max-images " + MAX_IMAGES);

        final Stage stage;
        final String cause;

        Kind(Stage stage, String cause) {
            this.stage = stage;
            this.cause = cause;
        }

        /** Whether the line never parses, so that the sample is named by its manifest line. */
        boolean unparsed() { return this == BAD_JSON || this == INVALID_UTF8; }

        /** Whether a limit filters the sample (it is sound), rather than it being an error. */
        boolean filtered() { return this == TOO_MANY_TOKENS || this == TOO_MANY_IMAGES; }

        /** The kind the feed records it as. */
        dev.stoker.core.SampleException.Kind recordedAs() {
            return filtered() ? dev.stoker.core.SampleException.Kind.FILTERED : dev.stoker.core.SampleException.Kind.ERROR;
        }
    }

    private static final String[] GOOD_IMAGES = {"p08_exact_448x448", "p03_small_40x36", "p05_gray_L_320x240", "p01_photo_grace_hopper"};

    private BadSamples() {}

    private static byte[] memoryBomb;

    /** The MEMORY_BOMB image, made once (deflating its 507 MB of rows takes a few seconds). */
    static synchronized byte[] memoryBomb() {
        if (memoryBomb == null) memoryBomb = dev.stoker.testkit.Bombs.blackPng(13_000, 13_000);
        return memoryBomb;
    }

    /** The id the feed reports for sample {@code index} when it is of {@code kind}. */
    static String expectedId(int index, Kind kind) {
        return kind.unparsed() ? "train.jsonl:" + (index + 1) : "s" + index;
    }

    /**
     * Writes {@code dir/train.jsonl} with {@code n} samples, one per line (sample i on line i + 1,
     * id {@code s<i>}); the samples in {@code bad} are broken as their kind says, the others are good
     * (one image, or none for every eleventh). Without {@code symlinks}, SYMLINK_ESCAPE is not allowed
     * (an object store has none).
     */
    static Path write(Path dir, int n, Map<Integer, Kind> bad, boolean symlinks) throws IOException {
        Path images = Files.createDirectories(dir.resolve("images"));
        for (String id : GOOD_IMAGES) {
            Path src = Vectors.get().inputImage(id);
            Files.copy(src, images.resolve(src.getFileName()), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        }
        Path fixtures = Vectors.projectDir().resolve("testdata/images");
        byte[] photo = Files.readAllBytes(Vectors.get().inputImage("p01_photo_grace_hopper"));
        Files.write(images.resolve("truncated.jpg"), Arrays.copyOf(photo, photo.length * 6 / 10));
        Files.copy(fixtures.resolve("bad_corrupt_huffman.jpg"), images.resolve("corrupt.jpg"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        Files.copy(fixtures.resolve("bad_corrupt_idat.png"), images.resolve("corrupt.png"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        Files.copy(fixtures.resolve("bad_unsupported.tif"), images.resolve("scan.tif"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        Files.copy(fixtures.resolve("bad_huge_header.png"), images.resolve("bomb.png"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        if (bad.containsValue(Kind.MEMORY_BOMB)) Files.write(images.resolve("membomb.png"), memoryBomb());
        if (bad.containsValue(Kind.OUT_OF_MEMORY))
            Files.copy(fixtures.resolve("bmp_rgb24.bmp"), images.resolve("oom.bmp"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        Files.writeString(images.resolve("notes.jpg"), "this is not an image\n");
        Files.write(images.resolve("empty.jpg"), new byte[0]);
        Files.write(images.resolve("strip.png"), png(6000, 29));
        if (bad.containsValue(Kind.SYMLINK_ESCAPE)) {
            if (!symlinks) throw new IllegalArgumentException("no symlinks in this data set");
            Path outside = Files.createDirectories(dir.resolveSibling(dir.getFileName() + "-outside"));
            Files.write(outside.resolve("secret.jpg"), photo);
            Path link = images.resolve("link.jpg");
            Files.deleteIfExists(link);
            Files.createSymbolicLink(link, outside.resolve("secret.jpg"));
        }
        var out = new ByteArrayOutputStream();
        for (int i = 0; i < n; i++) {
            out.writeBytes(line(i, bad.get(i)));
            out.write('\n');
        }
        return Files.write(dir.resolve("train.jsonl"), out.toByteArray());
    }

    private static byte[] line(int i, Kind kind) {
        String id = "\"id\": \"s" + i + "\", ";
        String ask = "What is shown in picture " + i + "?";
        String answer = "Picture " + i + " shows " + "something ".repeat(1 + i % 4).strip() + ".";
        if (kind == null) {
            if (i % 11 == 5) return sample(id, "", ask, answer);
            return sample(id, "\"image\": \"images/" + Vectors.get().inputImage(GOOD_IMAGES[i % GOOD_IMAGES.length]).getFileName() + "\", ",
                    "<image>\\n" + ask, answer);
        }
        return switch (kind) {
            case MISSING -> image(id, "images/missing_" + i + ".jpg", ask, answer);
            case TRUNCATED_JPEG -> image(id, "images/truncated.jpg", ask, answer);
            case CORRUPT_JPEG -> image(id, "images/corrupt.jpg", ask, answer);
            case CORRUPT_PNG -> image(id, "images/corrupt.png", ask, answer);
            case TEXT_NAMED_JPG -> image(id, "images/notes.jpg", ask, answer);
            case TIFF -> image(id, "images/scan.tif", ask, answer);
            case EMPTY_FILE -> image(id, "images/empty.jpg", ask, answer);
            case DECOMPRESSION_BOMB -> image(id, "images/bomb.png", ask, answer);
            case MEMORY_BOMB -> image(id, "images/membomb.png", ask, answer);
            case OUT_OF_MEMORY -> image(id, "images/oom.bmp", ask, answer);
            case TOO_ELONGATED -> image(id, "images/strip.png", ask, answer);
            case BAD_JSON -> ("{" + id + "\"conversations\": [{\"from\": \"human\", \"value\": \"" + ask + "\"}").getBytes(StandardCharsets.UTF_8);
            case MISSING_CONVERSATIONS -> ("{" + id + "\"image\": \"images/p08_exact_448x448.png\"}").getBytes(StandardCharsets.UTF_8);
            case MISTYPED_IMAGE -> sample(id, "\"image\": 5, ", "<image>\\n" + ask, answer);
            case MISTYPED_TURN -> ("{" + id + "\"conversations\": [{\"from\": \"human\", \"value\": 5}, {\"from\": \"gpt\", \"value\": \""
                    + answer + "\"}]}").getBytes(StandardCharsets.UTF_8);
            case INVALID_UTF8 -> {
                byte[] b = sample(id, "", "caf\u00e9 " + ask, answer);
                int at = new String(b, StandardCharsets.ISO_8859_1).indexOf("caf") + 3;
                b[at + 1] = (byte) 0x28; // é is C3 A9; C3 28 is not UTF-8
                yield b;
            }
            case TOO_MANY_TOKENS -> image(id, "images/p03_small_40x36.png", ask + " Describe it word by word.".repeat(300), answer);
            case PATH_ESCAPE -> image(id, "../../etc/passwd", ask, answer);
            case SYMLINK_ESCAPE -> image(id, "images/link.jpg", ask, answer);
            case TOO_MANY_IMAGES -> sample(id, "\"image\": [\"images/p08_exact_448x448.png\", \"images/p03_small_40x36.png\"], ",
                    "<image>\\n<image>\\n" + ask, answer);
        };
    }

    private static byte[] image(String id, String ref, String ask, String answer) {
        return sample(id, "\"image\": \"" + ref + "\", ", "<image>\\n" + ask, answer);
    }

    private static byte[] sample(String id, String image, String ask, String answer) {
        return ("{" + id + image + "\"conversations\": [{\"from\": \"human\", \"value\": \"" + ask + "\"}, {\"from\": \"gpt\", \"value\": \""
                + answer + "\"}]}").getBytes(StandardCharsets.UTF_8);
    }

    private static byte[] png(int width, int height) throws IOException {
        var out = new ByteArrayOutputStream();
        ImageIO.write(new BufferedImage(width, height, BufferedImage.TYPE_3BYTE_BGR), "png", out);
        return out.toByteArray();
    }
}
