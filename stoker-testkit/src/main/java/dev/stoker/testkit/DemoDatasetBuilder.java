package dev.stoker.testkit;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.awt.RenderingHints;
import java.awt.image.BufferedImage;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.Stream;
import javax.imageio.IIOImage;
import javax.imageio.ImageIO;
import javax.imageio.ImageWriteParam;

/**
 * Builds the demo data set: random crops of the bundled photographs at realistic capture sizes,
 * saved as JPEG, with synthetic VQA conversations in both sample formats (LLaVA
 * {@code conversations} and HF {@code messages}). Deterministic for a seed; reused when present.
 * Used by {@code stoker demo} and by tests that need a realistic data set.
 */
public final class DemoDatasetBuilder {
    public static final String VERSION = "demo-1";
    private static final int[][] SIZES = {{640, 480}, {1280, 720}, {1920, 1080}, {1024, 768}};
    private static final double[] SIZE_WEIGHTS = {0.45, 0.25, 0.15, 0.15};
    private static final String[] OBJECTS = ("tree house window person bird flower cup bottle road river bridge "
            + "mountain cloud sky building street boat lamp book field grass beach wave ship kite bench rocket planet").split(" ");
    private static final String[] ADJECTIVES = ("red blue green small large old bright dark wooden distant tall "
            + "narrow wide wet shiny pale vivid quiet warm cold soft cloudy sunny foggy").split(" ");
    private static final String[] QUESTIONS = {
        "What is the %s %s in the image?", "Describe the image in detail.", "How many %ss can you see?",
        "Write a short caption for this photo.", "What time of day does this scene suggest, and why?",
        "Where is the %s located relative to the %s?",
    };

    private final ObjectMapper json = new ObjectMapper();

    /**
     * Builds {@code n} samples from the photos in {@code photosDir} into {@code out} unless a build with the same settings is
     * there; returns the manifest, {@code out/train.jsonl}.
     */
    public Path build(Path photosDir, Path out, int n, long seed) throws IOException {
        Path manifest = out.resolve("train.jsonl");
        Path info = out.resolve("dataset_info.json");
        String stamp = VERSION + " n=" + n + " seed=" + seed;
        if (Files.exists(manifest) && Files.exists(info) && json.readTree(info.toFile()).path("stamp").asText().equals(stamp))
            return manifest;
        List<BufferedImage> photos = loadPhotos(photosDir);
        Files.createDirectories(out.resolve("images"));
        var lines = new StringBuilder();
        long imageBytes = 0;
        int images = 0;
        for (int i = 0; i < n; i++) {
            var rng = new SplittableRandom(seed * 1_000_003L + i);
            int count = rng.nextDouble() < 0.05 ? 0 : rng.nextDouble() < 0.08 ? 2 : 1;
            var paths = new ArrayList<String>();
            for (int k = 0; k < count; k++) {
                String rel = count == 1 ? String.format("images/%06d.jpg", i) : String.format("images/%06d_%d.jpg", i, k);
                byte[] jpeg = crop(photos.get(rng.nextInt(photos.size())), rng);
                Files.write(out.resolve(rel), jpeg);
                imageBytes += jpeg.length;
                images++;
                paths.add(rel);
            }
            lines.append(json.writeValueAsString(sample(i, paths, rng))).append('\n');
        }
        Files.writeString(manifest, lines.toString(), StandardCharsets.UTF_8);
        ObjectNode meta = json.createObjectNode().put("stamp", stamp).put("samples", n).put("images", images)
                .put("image_bytes", imageBytes).put("source", "random crops of assets/photos (see assets/photos/LICENSES.tsv)");
        json.writerWithDefaultPrettyPrinter().writeValue(info.toFile(), meta);
        return manifest;
    }

    private static List<BufferedImage> loadPhotos(Path dir) throws IOException {
        try (Stream<Path> files = Files.list(dir)) {
            List<BufferedImage> out = new ArrayList<>();
            for (Path p : files.filter(f -> f.toString().endsWith(".jpg")).sorted().toList()) {
                BufferedImage img = ImageIO.read(p.toFile());
                if (img == null) throw new IOException("cannot read photo " + p);
                out.add(toRgb(img));
            }
            if (out.isEmpty()) throw new IOException("no photos in " + dir);
            return out;
        }
    }

    private static BufferedImage toRgb(BufferedImage img) {
        if (img.getType() == BufferedImage.TYPE_3BYTE_BGR) return img;
        var rgb = new BufferedImage(img.getWidth(), img.getHeight(), BufferedImage.TYPE_3BYTE_BGR);
        rgb.getGraphics().drawImage(img, 0, 0, null);
        return rgb;
    }

    private static byte[] crop(BufferedImage photo, SplittableRandom rng) {
        int[] size = SIZES[pick(SIZE_WEIGHTS, rng)];
        int tw = size[0], th = size[1];
        if (rng.nextDouble() < 0.15) { int t = tw; tw = th; th = t; }
        int sw = photo.getWidth(), sh = photo.getHeight();
        double cwMax = Math.min(sw, sh * (double) tw / th);
        double f = 0.5 + 0.5 * rng.nextDouble();
        int cw = Math.max(8, (int) (cwMax * f));
        int ch = Math.max(8, (int) (cw * (double) th / tw));
        ch = Math.min(ch, sh);
        int x0 = rng.nextInt(Math.max(1, sw - cw + 1));
        int y0 = rng.nextInt(Math.max(1, sh - ch + 1));
        var out = new BufferedImage(tw, th, BufferedImage.TYPE_3BYTE_BGR);
        var g = out.createGraphics();
        g.setRenderingHint(RenderingHints.KEY_INTERPOLATION, RenderingHints.VALUE_INTERPOLATION_BILINEAR);
        g.drawImage(photo, 0, 0, tw, th, x0, y0, x0 + cw, y0 + ch, null);
        g.dispose();
        return encodeJpeg(out, 0.85f + 0.1f * (float) rng.nextDouble());
    }

    private static byte[] encodeJpeg(BufferedImage img, float quality) {
        try (var bytes = new java.io.ByteArrayOutputStream(); var ios = ImageIO.createImageOutputStream(bytes)) {
            var writer = ImageIO.getImageWritersByFormatName("jpeg").next();
            try {
                ImageWriteParam param = writer.getDefaultWriteParam();
                param.setCompressionMode(ImageWriteParam.MODE_EXPLICIT);
                param.setCompressionQuality(quality);
                writer.setOutput(ios);
                writer.write(null, new IIOImage(img, null, null), param);
            } finally {
                writer.dispose();
            }
            ios.flush();
            return bytes.toByteArray();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static int pick(double[] weights, SplittableRandom rng) {
        double r = rng.nextDouble(), acc = 0;
        for (int i = 0; i < weights.length; i++) if ((acc += weights[i]) >= r) return i;
        return weights.length - 1;
    }

    private ObjectNode sample(int index, List<String> images, SplittableRandom rng) {
        String o1 = OBJECTS[rng.nextInt(OBJECTS.length)], o2 = OBJECTS[rng.nextInt(OBJECTS.length)];
        String a = ADJECTIVES[rng.nextInt(ADJECTIVES.length)];
        String q = images.isEmpty() ? "Explain the difference between a " + a + " " + o1 + " and a " + o2 + "."
                : String.format(QUESTIONS[rng.nextInt(QUESTIONS.length)], a, o1, o2).replace("%s", o2);
        var answer = new StringBuilder();
        int sentences = 1 + rng.nextInt(6);
        for (int s = 0; s < sentences; s++) {
            answer.append(s == 0 ? "The " : " Next to it, the ").append(ADJECTIVES[rng.nextInt(ADJECTIVES.length)]).append(' ')
                  .append(OBJECTS[rng.nextInt(OBJECTS.length)]).append(" is ").append(ADJECTIVES[rng.nextInt(ADJECTIVES.length)])
                  .append(" and stands near the ").append(OBJECTS[rng.nextInt(OBJECTS.length)]).append('.');
        }
        ObjectNode rec = json.createObjectNode().put("id", String.format("demo-%06d", index));
        if (index % 5 == 4) {
            ArrayNode messages = rec.putArray("messages");
            ObjectNode user = messages.addObject().put("role", "user");
            ArrayNode content = user.putArray("content");
            for (String img : images) content.addObject().put("type", "image").put("image", img);
            content.addObject().put("type", "text").put("text", q);
            messages.addObject().put("role", "assistant").put("content", answer.toString());
        } else {
            if (images.size() == 1) rec.put("image", images.get(0));
            else if (images.size() > 1) { ArrayNode arr = rec.putArray("image"); images.forEach(arr::add); }
            ArrayNode conv = rec.putArray("conversations");
            conv.addObject().put("from", "human").put("value", "<image>\n".repeat(images.size()) + q);
            conv.addObject().put("from", "gpt").put("value", answer.toString());
        }
        return rec;
    }
}
