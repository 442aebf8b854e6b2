package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.pipeline.feed.ErrorPolicy;
import dev.stoker.pipeline.feed.FeedConfig;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.plan.pack.Packing;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** One configuration: defaults defined once (the pipeline's own), validated once, the same read back from JSON and YAML. */
@Timeout(30)
class NodeConfigTest {
    @TempDir Path tmp;

    /**
     * {@code --autotune}: on by default, the knobs given as its starting points and the source's fetch bound raised to the
     * tuner's ceiling; off, the knobs pinned and the source bounded by {@code --fetch-concurrency} as before.
     */
    @Test
    void autotuneIsOnByDefaultAndOffPinsTheKnobs() {
        var on = NodeConfig.builder().data("a.jsonl").set(NodeConfig.FETCH_CONCURRENCY, 3).build();
        assertTrue(on.feedConfig(dev.stoker.pipeline.feed.FeedMode.ZERO_COPY).autotune());
        assertEquals(3, on.feedConfig(dev.stoker.pipeline.feed.FeedMode.ZERO_COPY).fetchConcurrency());
        assertEquals(dev.stoker.pipeline.feed.FeedConfig.FETCH_CONCURRENCY_TUNED_MAX, on.sourceConfig().maxInFlight());
        var off = NodeConfig.builder().data("a.jsonl").set(NodeConfig.FETCH_CONCURRENCY, 3).set("autotune", "off").build();
        assertFalse(off.feedConfig(dev.stoker.pipeline.feed.FeedMode.ZERO_COPY).autotune());
        assertEquals(3, off.sourceConfig().maxInFlight());
        var bad = assertThrows(ConfigException.class, () -> NodeConfig.builder().data("a.jsonl").set("autotune", "maybe").build());
        assertTrue(bad.getMessage().contains("autotune"), bad.getMessage());
    }

    /** Sources: one --data, a list of them with weights and image roots, and what is refused; the index cache. */
    @Test
    void sourcesWeightsImageRootsAndTheIndexCache() {
        var one = NodeConfig.builder().data("a.jsonl").build();
        assertEquals(List.of(new dev.stoker.source.mix.DataSources.Spec("a.jsonl", 1, null)), one.sources());
        var mix = NodeConfig.builder().set(NodeConfig.SOURCES, "[{\"data\": \"a.jsonl\"}, {\"data\": \"b.tar\", \"weight\": 0.5, \"image-root\": \"/img\"}]")
                .set(NodeConfig.IMAGE_ROOT, "/all").build();
        assertEquals(List.of(new dev.stoker.source.mix.DataSources.Spec("a.jsonl", 1, "/all"),
                new dev.stoker.source.mix.DataSources.Spec("b.tar", 0.5, "/img")), mix.sources());
        assertEquals("a.jsonl + b.tar", mix.data());
        var both = assertThrows(ConfigException.class, () -> NodeConfig.builder().data("a").set(NodeConfig.SOURCES, "[{\"data\": \"b\"}]").build());
        assertTrue(both.getMessage().contains("give one"), both.getMessage());
        var zero = assertThrows(ConfigException.class, () -> NodeConfig.builder().set(NodeConfig.SOURCES, "[{\"data\": \"b\", \"weight\": 0}]").build());
        assertTrue(zero.getMessage().contains("sources[0]") && zero.getMessage().contains("weight must be positive"), zero.getMessage());
        var typo = assertThrows(ConfigException.class, () -> NodeConfig.builder().set(NodeConfig.SOURCES, "[{\"data\": \"b\", \"wieght\": 2}]").build());
        assertTrue(typo.getMessage().contains("unknown key 'wieght'"), typo.getMessage());
        assertNull(NodeConfig.builder().data("a").set(NodeConfig.INDEX_CACHE, "off").build().indexCache());
        assertEquals(Path.of("/tmp/ic"), NodeConfig.builder().data("a").set(NodeConfig.INDEX_CACHE, "/tmp/ic").build().indexCache().dir());
    }

    @Test
    void theDefaultsAreThePipelinesDefaults() {
        var config = NodeConfig.builder().data("ds/train.jsonl").build();
        // --video auto over data that shows no video (here: none to read) is an image job (VideoSettingsTest: auto)
        var encode = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL);
        assertEquals(encode, config.encodeOptions(), "a node's encoding is the library's default encoding");
        for (var mode : FeedMode.values())
            // but tuned: a node's knobs are starting points (--autotune on), an embedder's FeedConfig.of pinned unless it asks
            assertEquals(FeedConfig.of(mode, encode, 1, 8).withAutotune(FeedConfig.AUTOTUNE_DEFAULT), config.feedConfig(mode),
                    "a node's feed is FeedConfig's default feed: " + mode);
        assertEquals(FeedConfig.SEED_DEFAULT, config.seed());
        assertEquals(1234, config.seed(), "the seed a CLI job and an embedder's job share");
        assertEquals(Runtime.getRuntime().availableProcessors(), config.threads(), "threads default to the cores");
        assertEquals(config.get(NodeConfig.NODES), config.workers(), "workers default to one per node");
        assertTrue(config.shmBudgetBytes() > 0);
        assertEquals(List.of(), config.join());
        assertFalse(config.isGiven(NodeConfig.SEED));
        assertTrue(config.isGiven(NodeConfig.DATA_KEY));
        // the decode memory budget: shared among the CPU pool's threads unless given (suffixes as other byte sizes)
        assertEquals(0, config.encodeOptions().decodeMemoryBytes());
        assertEquals(256L << 20, NodeConfig.builder().data("ds/train.jsonl").set("decode-memory", "256M").build()
                .encodeOptions().decodeMemoryBytes());
        assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d").set("decode-memory", "0").build());
    }

    @Test
    void everySettingIsReadFromTheTextItIsWrittenAs() {
        for (var k : NodeConfig.keys()) {
            if (k.defaultValue() == null) continue;
            assertEquals(k.defaultValue(), k.parse(k.format(k.defaultValue())), k.name());
        }
        var names = NodeConfig.keys().stream().map(ConfigKey::name).toList();
        assertEquals(names.size(), names.stream().distinct().count(), "one name, one setting");
        assertEquals(NodeConfig.RANKS, NodeConfig.key("ranks"));
        assertNull(NodeConfig.key("seeds"));
    }

    /** Audit #2: the default policy cannot train on garbage: a finite error rate, judged early, and the help says so. */
    @Test
    void theDefaultErrorPolicyHasAFiniteRate() {
        var feed = NodeConfig.builder().data("ds/train.jsonl").build().feedConfig(FeedMode.ZERO_COPY);
        assertEquals(ErrorPolicy.SKIP, feed.onError());
        assertEquals(0.1, feed.maxErrorRate());
        assertEquals(0.1, NodeConfig.MAX_ERROR_RATE.defaultValue());
        String help = NodeConfig.MAX_ERROR_RATE.doc();
        assertTrue(help.contains("judged from 100 samples on, and at once when the first 32 samples all fail"), help);
        assertTrue(help.contains("filtered samples are not counted"), help);
    }

    /** Audits #22 and #23: the local read timeout and the confinement of a manifest's URIs reach the source, confined by default. */
    @Test
    void localReadTimeoutAndUriConfinementReachTheSource() {
        var defaults = NodeConfig.builder().data("ds/train.jsonl").build().sourceConfig();
        assertEquals(30_000, defaults.localReadTimeoutMillis());
        assertFalse(defaults.refsOutsideRoot());
        var given = NodeConfig.builder().data("ds/train.jsonl").set(NodeConfig.LOCAL_READ_TIMEOUT_MS, 1234L)
                .set(NodeConfig.ALLOW_REFS_OUTSIDE_ROOT, true).build().sourceConfig();
        assertEquals(1234, given.localReadTimeoutMillis());
        assertTrue(given.refsOutsideRoot());
        assertEquals(NodeConfig.ALLOW_REFS_OUTSIDE_ROOT, NodeConfig.key("allow-refs-outside-root"));
        assertEquals(NodeConfig.LOCAL_READ_TIMEOUT_MS, NodeConfig.key("local-read-timeout-ms"));
    }

    static NodeConfig sample() {
        return NodeConfig.builder().data("s3://bucket/ds/train.jsonl").processor(ProcessorPreset.QWEN3_VL).pixels(4096, 200704).ranks(8)
                .batch(4).seed(99).threads(3).pixelFormat(PixelFormat.UINT8).mode(FeedMode.PREFETCH).shmBudgetBytes(3L << 30)
                .set(NodeConfig.ON_ERROR, ErrorPolicy.FAIL).set(NodeConfig.MAX_ERROR_RATE, 0.25).set(NodeConfig.S3_PATH_STYLE, true)
                .set(NodeConfig.JOIN, List.of("10.0.0.1:2551", "10.0.0.2:2551")).set(NodeConfig.JOB, "job with spaces: and colons")
                .set(NodeConfig.ERRORS_FILE, Path.of("/tmp/x y/errors.jsonl")).build();
    }

    @Test
    void aConfigurationTravelsAsJsonAndComesBackTheSame() {
        var config = sample();
        var back = NodeConfig.fromJson(config.toJson());
        assertEquals(config, back);
        assertEquals(config.feedConfig(FeedMode.ZERO_COPY), back.feedConfig(FeedMode.ZERO_COPY));
        assertFalse(back.isGiven(NodeConfig.PREFETCH_BATCHES), "a default stays a default where it is read");
    }

    @Test
    void thePrintedYamlReadBackMeansTheSame() throws Exception {
        var config = sample();
        String yaml = config.toYaml(NodeConfig.keys());
        assertTrue(yaml.contains("\nranks: 8\n"), yaml);
        assertTrue(yaml.contains("# fetch-concurrency: 64  (default)"), yaml);
        assertTrue(yaml.contains("# threads: ") || yaml.contains("threads: 3"), yaml);
        Path file = Files.writeString(tmp.resolve("node.yaml"), yaml);
        assertEquals(config, NodeConfig.fromYaml(file));
        // and the defaults, printed, are NodeConfig's: a file of defaults only reads back as the builder's defaults
        var defaults = NodeConfig.builder().data("d.jsonl").build();
        Path d = Files.writeString(tmp.resolve("d.yaml"), defaults.toYaml(NodeConfig.keys()));
        assertEquals(defaults, NodeConfig.fromYaml(d));
    }

    @Test
    void onlyTheGroupsAskedForTravel() {
        var job = sample().only(NodeConfig.groups(ConfigKey.Group.PROCESSOR, ConfigKey.Group.DATA, ConfigKey.Group.STORE));
        assertEquals(8, job.ranks());
        assertEquals(List.of(), job.join(), "where a node listens is its own");
        assertEquals(FeedMode.ZERO_COPY, job.mode());
    }

    /** Without --model, each family's bounds are its published processor's (Hugging Face's defaults, not the constructor's). */
    @Test
    void eachFamilyDefaultsToItsPublishedProcessorsBounds() {
        for (var preset : ProcessorPreset.values()) {
            var vision = NodeConfig.builder().data("d.jsonl").processor(preset).build().encodeOptions().vision();
            assertEquals(preset.vision(), vision, preset.cliName());
        }
        var qwen3 = NodeConfig.builder().data("d.jsonl").processor(ProcessorPreset.QWEN3_VL).build().encodeOptions().vision();
        assertEquals(65536, qwen3.minPixels());
        assertEquals(16777216, qwen3.maxPixels());
        var qwen25 = NodeConfig.builder().data("d.jsonl").build().encodeOptions().vision();
        assertEquals(3136, qwen25.minPixels());
        assertEquals(12845056, qwen25.maxPixels());
        assertEquals(500_000, NodeConfig.builder().data("d.jsonl").set(NodeConfig.MAX_PIXELS, 500_000L).build().encodeOptions().vision().maxPixels());
    }

    /** An audio family encodes its images and videos under its vision family, with its audio settings beside (issue 32). */
    @Test
    void anAudioFamilyEncodesUnderItsVisionFamilyWithItsAudioSettings() {
        var o = NodeConfig.builder().data("d.jsonl").processor(ProcessorPreset.QWEN2_5_OMNI).build().encodeOptions();
        assertEquals(ProcessorPreset.QWEN2_5_VL, o.preset());
        assertEquals(dev.stoker.core.AudioPreset.QWEN2_5_OMNI, o.audio().preset());
        assertEquals(dev.stoker.encode.audio.AudioEncoding.Pad.VALID, o.audio().pad());
        assertTrue(o.sampleParser().acceptsAudio());
        var hf = NodeConfig.builder().data("d.jsonl").processor(ProcessorPreset.QWEN3_OMNI)
                .set(NodeConfig.AUDIO_PAD, dev.stoker.encode.audio.AudioEncoding.Pad.HF).build().encodeOptions();
        assertEquals(dev.stoker.encode.audio.AudioEncoding.Pad.HF, hf.audio().pad());
        var vl = NodeConfig.builder().data("d.jsonl").build().encodeOptions();
        assertEquals(null, vl.audio());
        assertFalse(vl.sampleParser().acceptsAudio());
        assertThrows(IllegalArgumentException.class, () -> dev.stoker.encode.EncodeOptions.defaults(ProcessorPreset.QWEN2_5_OMNI));
    }

    /**
     * Qwen2-Audio's default pad is hf: its audio tower takes exactly 3,000 frames a clip (transformers 5.18.0
     * Qwen2AudioEncoder.forward raises on any other length); valid when asked for; the Omni families' default is valid.
     */
    @Test
    void qwen2AudioPadsAsTheProcessorByDefault() {
        var pad = (java.util.function.Function<NodeConfig.Builder, dev.stoker.encode.audio.AudioEncoding.Pad>) b ->
                b.build().encodeOptions().audio().pad();
        assertEquals(dev.stoker.encode.audio.AudioEncoding.Pad.HF, pad.apply(NodeConfig.builder().data("d.jsonl").processor(ProcessorPreset.QWEN2_AUDIO)));
        assertEquals(dev.stoker.encode.audio.AudioEncoding.Pad.VALID, pad.apply(NodeConfig.builder().data("d.jsonl")
                .processor(ProcessorPreset.QWEN2_AUDIO).set(NodeConfig.AUDIO_PAD, dev.stoker.encode.audio.AudioEncoding.Pad.VALID)));
        for (var omni : new ProcessorPreset[] {ProcessorPreset.QWEN2_5_OMNI, ProcessorPreset.QWEN3_OMNI})
            assertEquals(dev.stoker.encode.audio.AudioEncoding.Pad.VALID, pad.apply(NodeConfig.builder().data("d.jsonl").processor(omni)));
    }

    /**
     * --shm-resident bounds what a zero-copy rank may buffer (its share of the limit; buffered batches keep their pages), so
     * that neither the buffer nor the autotuner's prefetch raises hold more; other modes, and no limit, keep --prefetch-bytes.
     */
    @Test
    void theResidentLimitBoundsEachZeroCopyRanksPrefetchBytes() {
        var pf = dev.stoker.pipeline.feed.FeedMode.PREFETCH;
        var zc = dev.stoker.pipeline.feed.FeedMode.ZERO_COPY;
        var plain = NodeConfig.builder().data("d.jsonl").ranks(2).build();
        long byDefault = plain.get(NodeConfig.PREFETCH_BYTES);
        assertEquals(byDefault, plain.feedConfig(zc).prefetchBytes());
        var limited = NodeConfig.builder().data("d.jsonl").ranks(2).set("shm-resident", "100M").build();
        assertEquals(50L << 20, limited.feedConfig(zc).prefetchBytes(), "each of the two ranks gets half");
        assertEquals(byDefault, limited.feedConfig(pf).prefetchBytes(), "heap buffers are not the store's pages");
        var large = NodeConfig.builder().data("d.jsonl").ranks(2).set("shm-resident", "64G").build();
        assertEquals(byDefault, large.feedConfig(zc).prefetchBytes(), "never above --prefetch-bytes");
        assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d.jsonl").set("shm-resident", "0").build());
    }

    /** --model: the family, bounds and tokenizer come from the folder; the effective values are printed and fingerprinted. */
    @Test
    void aModelFolderGivesTheFamilyBoundsAndTokenizer() throws Exception {
        Path dir = dev.stoker.testkit.ModelFolders.write(tmp.resolve("qwen3"), "qwen3-vl");
        var config = NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir).set(NodeConfig.VIDEO, NodeConfig.VideoMode.ON).build();
        assertEquals(ProcessorPreset.QWEN3_VL, config.processor());
        assertEquals(ProcessorPreset.QWEN3_VL.vision(), config.encodeOptions().vision());
        assertEquals(dir.resolve("tokenizer.json"), config.get(NodeConfig.TOKENIZER));
        assertTrue(config.isFromModel(NodeConfig.MAX_PIXELS) && !config.isGiven(NodeConfig.MAX_PIXELS));
        assertEquals(List.of(), config.warnings());
        String model = config.encodeOptions().model();
        assertTrue(model != null && model.startsWith("tokenizer:") && model.length() == "tokenizer:".length() + 64, model);
        // the same settings given by hand encode the same, but for the model's part of the fingerprint; the folder's
        // transformers_version (4.57.0.dev0) implies the torchvision image backend
        var byHand = NodeConfig.builder().data("d.jsonl").processor(ProcessorPreset.QWEN3_VL).tokenizer(dir.resolve("tokenizer.json"))
                .set("image-backend", "torchvision").set(NodeConfig.VIDEO, NodeConfig.VideoMode.ON).build();
        var video = config.videoEncoding(); // the folder's release (4.57) and its video processor settings (its preprocessor_config's)
        assertEquals(dev.stoker.text.VideoContract.TRANSFORMERS_4_57, video.contract());
        assertEquals(java.util.Map.of(dev.stoker.video.sample.VideoKey.MIN_PIXELS, 65536.0, dev.stoker.video.sample.VideoKey.MAX_PIXELS,
                16777216.0), video.processor().values());
        assertEquals(byHand.encodeOptions().withModel(model).withVideo(video), config.encodeOptions());
        String yaml = config.toYaml(NodeConfig.keys());
        assertTrue(yaml.contains("model: " + dir + "\n"), yaml);
        assertTrue(yaml.contains("# max-pixels: 16777216  (from --model)\n"), yaml);
        assertTrue(yaml.contains("# processor: qwen3-vl  (from --model)\n"), yaml);
        Path file = Files.writeString(tmp.resolve("m.yaml"), yaml);
        assertEquals(config.encodeOptions(), NodeConfig.fromYaml(file).encodeOptions(), "the printed file means the same");
        assertEquals(config.encodeOptions(), NodeConfig.fromJson(config.toJson()).encodeOptions(), "and so does the job a cluster carries");
        // an option that agrees with the model is no conflict
        assertEquals(config.encodeOptions(), NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir).set(NodeConfig.VIDEO, NodeConfig.VideoMode.ON)
                .processor(ProcessorPreset.QWEN3_VL).pixels(65536, 16777216).tokenizer(dir.resolve("tokenizer.json")).build().encodeOptions());
    }

    /** An option beside --model that disagrees with it is refused, naming both values and the model's file; --override-model lets it win, warned. */
    @Test
    void anOptionThatDisagreesWithTheModelIsRefusedUnlessOverridden() throws Exception {
        Path dir = dev.stoker.testkit.ModelFolders.write(tmp.resolve("qwen25"), "qwen2.5-vl");
        var max = assertThrows(ConfigException.class,
                () -> NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir).set(NodeConfig.MAX_PIXELS, 1003520L).build());
        assertEquals("--max-pixels 1003520 disagrees with the model's 12845056 (" + dir.resolve("preprocessor_config.json")
                + " max_pixels (or size.longest_edge)); leave --max-pixels out, or add --override-model", max.getMessage());
        var family = assertThrows(ConfigException.class,
                () -> NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir).processor(ProcessorPreset.QWEN3_VL).build());
        assertTrue(family.getMessage().startsWith("--processor qwen3-vl disagrees with the model's qwen2.5-vl (" + dir.resolve("config.json")
                + " model_type)"), family.getMessage());
        Path other = Files.writeString(tmp.resolve("other-tokenizer.json"), Files.readString(dir.resolve("tokenizer.json")) + " ");
        var tok = assertThrows(ConfigException.class,
                () -> NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir).tokenizer(other).build());
        assertTrue(tok.getMessage().startsWith("--tokenizer " + other + " is not the model's"), tok.getMessage());

        var overridden = NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir).set(NodeConfig.MAX_PIXELS, 1003520L)
                .set(NodeConfig.OVERRIDE_MODEL, true).build();
        assertEquals(1003520, overridden.encodeOptions().vision().maxPixels());
        assertEquals(List.of("--max-pixels 1003520 disagrees with the model's 12845056 (" + dir.resolve("preprocessor_config.json")
                + " max_pixels (or size.longest_edge)): using 1003520 (--override-model)"), overridden.warnings());
        assertEquals("--override-model goes with --model",
                assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d.jsonl").set(NodeConfig.OVERRIDE_MODEL, true).build())
                        .getMessage());
        var notQwen = assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, tmp.resolve("none")).build());
        assertEquals("--model: " + tmp.resolve("none") + ": not a folder", notQwen.getMessage());
    }

    /**
     * A model's chat template: the published one of its family is checked against the built-in template and passes; an
     * altered one is refused naming the case and character, unless --chat-template model, which encodes with it.
     */
    @Test
    void aModelsTemplateIsCheckedAgainstTheBuiltInOneOrRenderedWithModel() throws Exception {
        for (String family : dev.stoker.testkit.ModelFolders.FAMILIES) {
            Path dir = dev.stoker.testkit.ModelFolders.write(tmp.resolve("t-" + family), family,
                    dev.stoker.testkit.ModelFolders.publishedTemplate(family));
            var config = NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir).build();
            assertNull(config.encodeOptions().chatTemplate(), family + ": the published template is the built-in one: encode with that");
        }
        String altered = dev.stoker.testkit.ModelFolders.publishedTemplate("qwen2.5-vl").replace("You are a helpful assistant.", "You are helpful.");
        Path dir = dev.stoker.testkit.ModelFolders.write(tmp.resolve("altered"), "qwen2.5-vl", altered);
        var e = assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir).build());
        assertTrue(e.getMessage().startsWith("--model: the chat template of " + dir.resolve("chat_template.json") + " renders differently "
                + "from Stoker's built-in qwen2-vl template: template case '"), e.getMessage());
        assertTrue(e.getMessage().contains("'text_only' differs at character 27") && e.getMessage().endsWith("add --chat-template model"), e.getMessage());
        var model = NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir)
                .set(NodeConfig.CHAT_TEMPLATE, NodeConfig.ChatTemplateChoice.MODEL).build();
        assertEquals(altered, model.encodeOptions().chatTemplate());
        assertEquals(EncodeOptions.sha256(altered), model.encodeOptions().chatTemplateSha256(), "the template's digest, for the fingerprint");
        var none = assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d.jsonl")
                .set(NodeConfig.CHAT_TEMPLATE, NodeConfig.ChatTemplateChoice.MODEL).build());
        assertEquals("--chat-template model needs --model DIR", none.getMessage());
        Path thinking = dev.stoker.testkit.ModelFolders.write(tmp.resolve("thinking"), "qwen3-vl",
                dev.stoker.testkit.ModelFolders.publishedTemplate("qwen3-vl-thinking"));
        var t = assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, thinking).build());
        assertTrue(t.getMessage().contains("renders differently from Stoker's built-in qwen3-vl template"), t.getMessage());
    }

    @Test
    void theTextOnlyPolicyIsAProcessorSettingThatReachesTheEncoding() {
        var config = NodeConfig.builder().data("ds/train.jsonl").build();
        assertEquals(EncodeOptions.TextOnlyPolicy.DUMMY_IMAGE, config.encodeOptions().textOnly(), "text-only batches get a dummy image");
        assertEquals(ConfigKey.Group.PROCESSOR, NodeConfig.TEXT_ONLY.group(), "it travels with the processor's settings");
        var allow = NodeConfig.builder().data("ds/train.jsonl").set("text-only", "allow").build();
        assertEquals(EncodeOptions.TextOnlyPolicy.ALLOW, allow.encodeOptions().textOnly());
        assertEquals(EncodeOptions.TextOnlyPolicy.ALLOW, allow.feedConfig(FeedMode.ZERO_COPY).encode().textOnly());
        assertEquals(EncodeOptions.TextOnlyPolicy.ALLOW, NodeConfig.fromJson(allow.toJson()).encodeOptions().textOnly(), "a cluster job's nodes");
        assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.builder().set("text-only", "skip")).getMessage()
                .startsWith("--text-only: unknown value 'skip'; expected one of allow, dummy-image"));
    }

    /**
     * --transformers: the release the trainer runs chooses the input contract; by default the model folder's
     * {@code transformers_version}, shown as taken from the model; a bad value is refused naming the option (or the
     * model's file and field), and a config file's unquoted decimal, which YAML would read as a number, is refused.
     */
    @Test
    void theTransformersReleaseChoosesTheInputContract() throws Exception {
        var finetune = EncodeOptions.InputContract.QWEN_VL_FINETUNE;
        var v53 = EncodeOptions.InputContract.TRANSFORMERS_5_3;
        assertEquals(ConfigKey.Group.PROCESSOR, NodeConfig.TRANSFORMERS.group());
        assertEquals(finetune, NodeConfig.builder().data("d.jsonl").build().encodeOptions().inputContract(), "none: the official tensors");
        for (String v : List.of("4", "4.57.6", "5.2.0", "5.0.0rc1"))
            assertEquals(finetune, NodeConfig.builder().data("d.jsonl").set("transformers", v).build().encodeOptions().inputContract(), v);
        for (String v : List.of("5", "5.3", "5.18", "5.3.0.dev0", "6.0"))
            assertEquals(v53, NodeConfig.builder().data("d.jsonl").set("transformers", v).build().encodeOptions().inputContract(), v);
        for (String bad : List.of("five", "5.x", "v5.18", "5.18.0.1", "5..1", "5.18-rc1"))
            assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.builder().set("transformers", bad)).getMessage()
                    .startsWith("--transformers: '" + bad + "' is not a transformers version"), bad);
        var given = NodeConfig.builder().data("d.jsonl").set("transformers", "5.18").build();
        assertEquals(given.encodeOptions(), NodeConfig.fromJson(given.toJson()).encodeOptions(), "a cluster job's nodes");
        assertTrue(given.toYaml(NodeConfig.keys()).contains("\ntransformers: \"5.18\"\n"), given.toYaml(NodeConfig.keys()));
        assertTrue(NodeConfig.builder().data("d.jsonl").build().toYaml(NodeConfig.keys())
                .contains("# transformers: (default: with --model, its config.json transformers_version; else none"));

        Path dir = dev.stoker.testkit.ModelFolders.write(tmp.resolve("qwen3"), "qwen3-vl"); // saved with 4.57.0.dev0
        var model = NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir).build();
        assertTrue(model.isFromModel(NodeConfig.TRANSFORMERS) && !model.isGiven(NodeConfig.TRANSFORMERS));
        assertEquals(finetune, model.encodeOptions().inputContract());
        assertTrue(model.toYaml(NodeConfig.keys()).contains("# transformers: \"4.57.0.dev0\"  (from --model)\n"), model.toYaml(NodeConfig.keys()));
        var config = (com.fasterxml.jackson.databind.node.ObjectNode) new com.fasterxml.jackson.databind.ObjectMapper().readTree(dir.resolve("config.json").toFile());
        Files.writeString(dir.resolve("config.json"), config.put("transformers_version", "5.18.0").toString());
        var five = NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir).build();
        assertEquals(v53, five.encodeOptions().inputContract(), "the model's release");
        assertEquals(five.encodeOptions(), NodeConfig.fromYaml(Files.writeString(tmp.resolve("five.yaml"), five.toYaml(NodeConfig.keys())))
                .encodeOptions(), "the printed file means the same");
        var trainer = NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir).set("transformers", "4.57.6").build();
        assertEquals(finetune, trainer.encodeOptions().inputContract(), "given, the trainer's release wins over the one that saved the model");
        assertEquals(List.of(), trainer.warnings());
        Files.writeString(dir.resolve("config.json"), config.put("transformers_version", "latest").toString());
        var bad = assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir).build());
        assertTrue(bad.getMessage().startsWith("--model: " + dir.resolve("config.json") + ": transformers_version: 'latest' is not a "
                + "transformers version"), bad.getMessage());
        assertTrue(bad.getMessage().endsWith("; give --transformers VERSION, the release the trainer runs"), bad.getMessage());
        assertEquals(v53, NodeConfig.builder().data("d.jsonl").set(NodeConfig.MODEL, dir).set("transformers", "5").build()
                .encodeOptions().inputContract(), "a release given needs no readable one in the model");

        var unquoted = assertThrows(ConfigException.class,
                () -> NodeConfig.fromYaml(Files.writeString(tmp.resolve("u.yaml"), "data: d.jsonl\ntransformers: 5.10\n")));
        assertTrue(unquoted.getMessage().contains("transformers: 5.1 is a number to YAML"), unquoted.getMessage());
        assertEquals(v53, NodeConfig.fromYaml(Files.writeString(tmp.resolve("q.yaml"), "data: d.jsonl\ntransformers: \"5.10\"\n"))
                .encodeOptions().inputContract());
        assertEquals(v53, NodeConfig.fromYaml(Files.writeString(tmp.resolve("i.yaml"), "data: d.jsonl\ntransformers: 5\n"))
                .encodeOptions().inputContract(), "a whole number reads as it is written");
    }

    @Test
    void badValuesAreRefusedNamingTheOption() {
        assertEquals("--ranks: must be between 1 and 65536, got 0",
                assertThrows(ConfigException.class, () -> NodeConfig.builder().ranks(0).build()).getMessage());
        assertEquals("--batch: 'eight' is not a whole number",
                assertThrows(ConfigException.class, () -> NodeConfig.builder().set("batch", "eight")).getMessage());
        assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.builder().set("mode", "fast")).getMessage()
                .startsWith("--mode: unknown value 'fast'; expected one of serial, concurrent, prefetch, zero-copy"));
        assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.builder().set("shm-budget", "4Q")).getMessage()
                .contains("is not a byte count"));
        assertEquals(4L << 30, NodeConfig.builder().set("shm-budget", "4G").build().shmBudgetBytes());
        assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.builder().set("seeds", "x")).getMessage()
                .contains("unknown setting 'seeds'"));
        assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.builder().pixels(10_000, 5_000).build()).getMessage()
                .startsWith("--min-pixels/--max-pixels"));
        assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.builder().set(NodeConfig.FLIGHT_TOKEN_FILE, tmp).build())
                .getMessage().contains("need --flight"));
        assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.builder().set("join", "nohost")).getMessage()
                .contains("expected HOST:PORT"));
        assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.builder().set("max-error-rate", "1.5")).getMessage()
                .contains("between 0 and 1"));
    }

    @Test
    void aConfigFileWithAnUnknownKeyOrAMappingIsRefused() throws Exception {
        Path typo = Files.writeString(tmp.resolve("typo.yaml"), "data: d.jsonl\nrank: 2\n");
        assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.fromYaml(typo)).getMessage().contains("unknown setting 'rank'"));
        Path nested = Files.writeString(tmp.resolve("nested.yaml"), "data:\n  path: d.jsonl\n");
        assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.readSettings(nested)).getMessage().contains("got a mapping"));
        Path list = Files.writeString(tmp.resolve("list.yaml"), "join:\n  - 127.0.0.1:1\n  - 127.0.0.1:2\nranks: 3\n");
        var c = NodeConfig.fromYaml(list);
        assertEquals(List.of("127.0.0.1:1", "127.0.0.1:2"), c.join());
        assertEquals(3, c.ranks());
        assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.fromYaml(tmp.resolve("none.yaml"))).getMessage()
                .contains("no such file"));
    }

    /**
     * Packing: --batch beside --pack-tokens is refused (a packed step takes a variable number of samples), a packing
     * option without --pack-tokens too; N a multiple of --pack-pad-to; the options reach the feed's configuration and
     * travel through the printed YAML and the job's JSON unchanged.
     */
    @Test
    void packingOptionsAreCheckedReachTheFeedAndReadBackFromYaml() throws Exception {
        var batch = assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d.jsonl").packTokens(16384).batch(8).build());
        assertEquals("a packed step takes a variable number of samples: --batch does not apply with --pack-tokens", batch.getMessage());
        var alone = assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d.jsonl").packPatches(4096).build());
        assertEquals("--pack-patches goes with --pack-tokens N (N > 0: packing on)", alone.getMessage());
        var cost = assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d.jsonl").set("cost-llm-layers", "28").build());
        assertTrue(cost.getMessage().startsWith("--cost-llm-layers goes with --pack-tokens"), cost.getMessage());
        var pad = assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d.jsonl").packTokens(1000).set("pack-pad-to", "64").build());
        assertTrue(pad.getMessage().contains("multiple of pad-to 64"), pad.getMessage());
        assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.builder().set("balance", "even")).getMessage()
                .startsWith("--balance: unknown value 'even'; expected one of cost, count"));
        assertTrue(assertThrows(ConfigException.class, () -> NodeConfig.builder().set("cost-vit-params", "-1")).getMessage()
                .contains("must be a positive number"));

        var off = NodeConfig.builder().data("d.jsonl").build();
        assertFalse(off.packed());
        assertEquals(Packing.OFF, off.feedConfig(FeedMode.ZERO_COPY).packing());
        assertEquals(8, off.feedConfig(FeedMode.ZERO_COPY).batchSize(), "unpacked: --batch as before");

        var config = NodeConfig.builder().data("d.jsonl").ranks(8).packTokens(16384).packPatches(20000)
                .balance(PackPlanner.Balance.COUNT).set("pack-pad-to", "64").set("cost-llm-params", "3.1e9")
                .set("cost-llm-layers", "36").set("cost-vit-params", "650000000").set("cost-vision-trained", "false").build();
        var packing = config.feedConfig(FeedMode.ZERO_COPY).packing();
        assertTrue(config.feedConfig(FeedMode.ZERO_COPY).packed());
        var family = dev.stoker.plan.pack.PackCost.QWEN2_5_VL_3B;
        assertEquals(new Packing(16384, 20000, PackPlanner.Balance.COUNT, 64, new dev.stoker.plan.pack.PackCost(3.1e9, 36,
                family.llmAttentionWidth(), 6.5e8, family.vitAttentionLayers(), family.vitHidden(), false)), packing,
                "the constants given in the family's cost model, the others its own");
        assertEquals(family, NodeConfig.builder().data("d").packTokens(64).build().packing().cost(), "qwen2.5-vl: Qwen2.5-VL-3B's");
        assertEquals(dev.stoker.plan.pack.PackCost.QWEN3_VL_2B,
                NodeConfig.builder().data("d").packTokens(64).processor(ProcessorPreset.QWEN3_VL).build().packing().cost());
        // a model folder's config.json decides the cost model; one without the fields it needs is refused, unless every --cost-* is given
        Path model = dev.stoker.testkit.ModelFolders.write(tmp.resolve("model"), "qwen2.5-vl", null);
        var config25 = dev.stoker.testkit.ModelFolders.config("qwen2.5-vl").put("hidden_size", 2048).put("num_hidden_layers", 36)
                .put("num_attention_heads", 16).put("num_key_value_heads", 2).put("intermediate_size", 11008).put("vocab_size", 151936);
        Files.writeString(model.resolve("config.json"), config25.toString());
        assertEquals(dev.stoker.plan.pack.PackCost.fromModelFolder(model),
                NodeConfig.builder().data("d").packTokens(64).set(NodeConfig.MODEL, model).build().packing().cost());
        Path trimmed = dev.stoker.testkit.ModelFolders.write(tmp.resolve("trimmed"), "qwen2.5-vl", null);
        var refused = assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d").packTokens(64).set(NodeConfig.MODEL, trimmed).build());
        assertTrue(refused.getMessage().contains("hidden_size") && refused.getMessage().contains("give every --cost-* option"), refused.getMessage());
        var given = NodeConfig.builder().data("d").packTokens(64).set(NodeConfig.MODEL, trimmed).set("cost-llm-params", "1e9")
                .set("cost-llm-layers", "2").set("cost-llm-attention-width", "64").set("cost-vit-params", "1e8").set("cost-vit-attention-layers", "1")
                .set("cost-vit-hidden", "32").build();
        assertEquals(new dev.stoker.plan.pack.PackCost(1e9, 2, 64, 1e8, 1, 32, true), given.packing().cost());
        String yaml = config.toYaml(NodeConfig.keys());
        for (String line : List.of("pack-tokens: 16384", "pack-patches: 20000", "balance: count", "pack-pad-to: 64",
                "cost-llm-params: 3100000000", "cost-llm-layers: 36", "cost-vit-params: 650000000", "cost-vision-trained: \"false\""))
            assertTrue(yaml.contains("\n" + line + "\n"), line + " in\n" + yaml);
        assertTrue(yaml.contains("# cost-llm-attention-width: (default: the model's (--model), else the family's"), yaml);
        Path file = Files.writeString(tmp.resolve("packed.yaml"), yaml);
        var back = NodeConfig.fromYaml(file);
        assertEquals(config, back);
        assertEquals(packing, back.feedConfig(FeedMode.ZERO_COPY).packing());
        assertEquals(config, NodeConfig.fromJson(config.toJson()));
        assertEquals(3.1e9, NodeConfig.builder().data("d").packTokens(64).set("cost-llm-params", "3100000000").build().get(NodeConfig.COST_LLM_PARAMS));
    }

    /**
     * A node serves two rungs of the ladder, zero-copy and prefetch; the others run only in bench ladder's own feed, which
     * takes its modes apart from the configuration. A node's configuration asking for them is refused as it is built.
     */
    @Test
    void aNodeServesTheZeroCopyAndPrefetchRungsOnly() {
        for (var mode : List.of(FeedMode.ZERO_COPY, FeedMode.PREFETCH))
            assertEquals(mode, NodeConfig.builder().data("d").mode(mode).build().mode());
        assertEquals("--mode must be zero-copy or prefetch, got serial",
                assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d").set("mode", "serial").build()).getMessage());
        assertEquals("--mode must be zero-copy or prefetch, got concurrent",
                assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d").mode(FeedMode.CONCURRENT).build()).getMessage());
        var ladder = NodeConfig.builder().data("d").build();
        assertEquals(FeedMode.SERIAL, ladder.feedConfig(FeedMode.SERIAL).mode(), "a feed of its own runs any rung");
    }
}
