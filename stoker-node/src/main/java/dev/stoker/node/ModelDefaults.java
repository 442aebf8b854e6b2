package dev.stoker.node;

import static dev.stoker.node.NodeSettings.CHAT_TEMPLATE;
import static dev.stoker.node.NodeSettings.MAX_PIXELS;
import static dev.stoker.node.NodeSettings.MIN_PIXELS;
import static dev.stoker.node.NodeSettings.MODEL;
import static dev.stoker.node.NodeSettings.OVERRIDE_MODEL;
import static dev.stoker.node.NodeSettings.PROCESSOR_KEY;
import static dev.stoker.node.NodeSettings.TOKENIZER;
import static dev.stoker.node.NodeSettings.TRANSFORMERS;

import dev.stoker.core.AudioPreset;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.model.AudioModelFolder;
import dev.stoker.core.model.ModelFolder;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.TransformersVersion;
import dev.stoker.node.NodeSettings.ChatTemplateChoice;
import dev.stoker.text.ChatTemplateException;
import dev.stoker.text.JinjaChatRenderer;
import dev.stoker.text.TemplateCheck;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * What a model folder ({@code --model DIR}) gives a configuration: it is read once, as the configuration is built, and
 * each setting it knows (the family, the pixel bounds, the tokenizer, the transformers release) is adopted where none
 * was given. A setting given that disagrees with the model is refused, naming both values and the model's file, so
 * that a job never trains on a processor its model was not saved with by accident; {@code --override-model} keeps the
 * given value and warns once instead. The chat template is checked here too: with the built-in renderer the model's
 * template must render the template cases as Stoker's does, with the model's own it must compile.
 *
 * <p>A setting given beside {@code --transformers} is the exception: the model's release is the one that saved it,
 * the setting the one the trainer runs, so the setting wins without a word.
 */
final class ModelDefaults {
    /**
     * What the model folder gave: the folder, the settings taken from it, what {@code --override-model} let through
     * (each once), and what it adds to the encoding for the job's fingerprint ({@link EncodeOptions#model()}): the
     * SHA-256 of the tokenizer the job encodes with. {@link #NONE} without a model folder.
     */
    record Adopted(ModelFolder model, AudioModelFolder audioModel, Set<ConfigKey<?>> fromModel, List<String> warnings, String identity) {
        static final Adopted NONE = new Adopted(null, null, Set.of(), List.of(), null);

        Adopted {
            fromModel = Set.copyOf(fromModel);
            warnings = List.copyOf(warnings);
        }
    }

    /**
     * Template checks already made, by the template's SHA-256, family and renderer: the check renders 19 chats, and a
     * configuration is built more than once. Each holds what is wrong ("" for nothing), without the file it was read from.
     */
    private static final Map<String, String> TEMPLATE_CHECKS = new ConcurrentHashMap<>();

    private ModelDefaults() {}

    /**
     * Reads the model folder of {@code values} ({@code --model}), if any, and puts into {@code values} the settings it
     * gives that are not {@code given}; refuses (ConfigException) a given setting that disagrees with it unless
     * {@code --override-model}, a model folder that cannot be read, and a chat template that cannot be used.
     */
    static Adopted apply(Map<ConfigKey<?>, Object> values, Set<ConfigKey<?>> given) {
        Path dir = (Path) values.get(MODEL);
        boolean override = Boolean.TRUE.equals(values.get(OVERRIDE_MODEL));
        if (dir == null) {
            if (override) throw new ConfigException("--override-model goes with --model");
            if (values.get(CHAT_TEMPLATE) == ChatTemplateChoice.MODEL) throw new ConfigException("--chat-template model needs --model DIR");
            return Adopted.NONE;
        }
        if (AudioModelFolder.familyOf(dir) != null) return applyAudio(dir, values, given, override);
        ModelFolder model;
        try {
            model = ModelFolder.read(dir);
        } catch (ModelFolder.ModelFolderException e) {
            throw new ConfigException("--model: " + e.getMessage());
        }
        var fromModel = new LinkedHashSet<ConfigKey<?>>();
        var warnings = new ArrayList<String>();
        var adoption = new Adoption(values, given, fromModel, warnings, override);
        String pre = dir.resolve(ModelFolder.PREPROCESSOR_CONFIG).toString();
        adoption.adopt(PROCESSOR_KEY, model.family(), dir.resolve(ModelFolder.CONFIG) + " model_type");
        adoption.adopt(MIN_PIXELS, model.vision().minPixels(), pre + " min_pixels (or size.shortest_edge)");
        adoption.adopt(MAX_PIXELS, model.vision().maxPixels(), pre + " max_pixels (or size.longest_edge)");
        // --transformers given wins: the model's is the release that saved it, the setting the one the trainer runs
        if (!given.contains(TRANSFORMERS) && model.transformersVersion() != null) {
            try {
                values.put(TRANSFORMERS, TransformersVersion.parse(model.transformersVersion()));
            } catch (IllegalArgumentException e) {
                throw new ConfigException("--model: " + dir.resolve(ModelFolder.CONFIG) + ": transformers_version: " + e.getMessage()
                        + "; give --transformers VERSION, the release the trainer runs");
            }
            fromModel.add(TRANSFORMERS);
        }
        String tokenizerSha256 = adoption.tokenizer(model.tokenizer(), model.tokenizerSha256());
        checkTemplate(model, ((ProcessorPreset) values.get(PROCESSOR_KEY)).chatFamily(), (ChatTemplateChoice) values.get(CHAT_TEMPLATE));
        return new Adopted(model, null, fromModel, warnings, "tokenizer:" + tokenizerSha256);
    }

    /**
     * An audio family's folder (issue 32; {@link AudioModelFolder}): its family, its tokenizer and, for Qwen2.5-Omni, its
     * image processor's pixel bounds, adopted as a Qwen-VL folder's are; its chat template checked against the family's
     * built-in one over the audio template cases ({@link TemplateCheck#compare(dev.stoker.text.ChatRenderer, AudioPreset)}),
     * or compiled for {@code --chat-template model}. Its {@code transformers_version} is not read: the audio families'
     * tensors do not change with the release (docs/audio.md).
     */
    private static Adopted applyAudio(Path dir, Map<ConfigKey<?>, Object> values, Set<ConfigKey<?>> given, boolean override) {
        AudioModelFolder model;
        try {
            model = AudioModelFolder.read(dir);
        } catch (ModelFolder.ModelFolderException e) {
            throw new ConfigException("--model: " + e.getMessage());
        }
        var fromModel = new LinkedHashSet<ConfigKey<?>>();
        var warnings = new ArrayList<String>();
        var adoption = new Adoption(values, given, fromModel, warnings, override);
        adoption.adopt(PROCESSOR_KEY, ProcessorPreset.fromName(model.family().cliName()), dir.resolve(ModelFolder.CONFIG) + " model_type");
        if (model.vision() != null) {
            String pre = dir.resolve(ModelFolder.PREPROCESSOR_CONFIG).toString();
            adoption.adopt(MIN_PIXELS, model.vision().minPixels(), pre + " min_pixels (or size.shortest_edge)");
            adoption.adopt(MAX_PIXELS, model.vision().maxPixels(), pre + " max_pixels (or size.longest_edge)");
        }
        String tokenizerSha256 = adoption.tokenizer(model.tokenizer(), sha256(model.tokenizer()));
        var choice = (ChatTemplateChoice) values.get(CHAT_TEMPLATE);
        var family = ((ProcessorPreset) values.get(PROCESSOR_KEY)).audio();
        if (family == null) // --override-model kept a Qwen-VL processor: the folder's tokenizer and template are an audio model's
            throw new ConfigException("--model " + dir + " is a " + model.family().cliName() + " folder; --processor "
                    + ((ProcessorPreset) values.get(PROCESSOR_KEY)).cliName() + " takes no audio (leave --processor out)");
        checkTemplate(dir, model.chatTemplate(), model.chatTemplateFile(), choice,
                source -> TemplateCheck.compare(JinjaChatRenderer.compile(source), family), family.cliName());
        return new Adopted(null, model, fromModel, warnings, "tokenizer:" + tokenizerSha256);
    }

    /** One adoption's state: the values being filled, the settings given, and what was taken or let through. */
    private record Adoption(Map<ConfigKey<?>, Object> values, Set<ConfigKey<?>> given, Set<ConfigKey<?>> fromModel,
                            List<String> warnings, boolean override) {
        /** The model's value of {@code key} where none was given; a given one that differs is refused, or kept and warned about. */
        <T> void adopt(ConfigKey<T> key, T modelValue, String source) {
            if (!given.contains(key)) {
                values.put(key, modelValue);
                fromModel.add(key);
                return;
            }
            @SuppressWarnings("unchecked") T value = (T) values.get(key);
            if (value.equals(modelValue)) return;
            String what = key.option() + " " + key.format(value) + " disagrees with the model's " + key.format(modelValue) + " ("
                    + source + ")";
            if (!override) throw new ConfigException(what + "; leave " + key.option() + " out, or add --override-model");
            warnings.add(what + ": using " + key.format(value) + " (--override-model)");
        }

        /** The model's tokenizer where {@code --tokenizer} was not given, else the given one checked to be it: the SHA-256 encoded with. */
        String tokenizer(Path modelTokenizer, String modelSha256) {
            Path tokenizer = (Path) values.get(TOKENIZER);
            if (tokenizer == null) {
                values.put(TOKENIZER, modelTokenizer);
                fromModel.add(TOKENIZER);
                return modelSha256;
            }
            String sha = sha256(tokenizer);
            if (!sha.equals(modelSha256)) {
                String what = "--tokenizer " + tokenizer + " is not the model's " + modelTokenizer + " (their bytes differ)";
                if (!override) throw new ConfigException(what + "; leave --tokenizer out, or add --override-model");
                warnings.add(what + ": encoding with " + tokenizer + " (--override-model)");
            }
            return sha;
        }
    }

    /**
     * The model's chat template against {@code choice}: with the built-in renderer, the model's template must render the
     * template cases as the built-in template of {@code family} does (else refused, naming the case and character);
     * with the model's own, it must compile. A model without a template encodes with the built-in one.
     */
    private static void checkTemplate(ModelFolder model, ProcessorPreset.ChatFamily family, ChatTemplateChoice choice) {
        checkTemplate(model.dir(), model.chatTemplate(), model.chatTemplateSource(), choice, source -> TemplateCheck.compare(source, family),
                ConfigKey.cliName(family));
    }

    /**
     * {@link #checkTemplate(ModelFolder, ProcessorPreset.ChatFamily, ChatTemplateChoice)} for the template {@code source}
     * read from {@code dir}'s {@code sourceFile}, {@code compare} running it against the built-in template of {@code builtIn}.
     */
    private static void checkTemplate(Path dir, String source, String sourceFile, ChatTemplateChoice choice,
                                      java.util.function.Function<String, java.util.Optional<TemplateCheck.Difference>> compare, String builtIn) {
        Path file = dir.resolve(sourceFile == null ? ModelFolder.CHAT_TEMPLATE_JSON : sourceFile);
        if (source == null) {
            if (choice == ChatTemplateChoice.MODEL)
                throw new ConfigException("--chat-template model: " + dir + " has no chat template (chat_template.jinja, "
                        + "chat_template.json or tokenizer_config.json's chat_template)");
            return;
        }
        // cached without the file's path: two folders may hold the same template, and each refusal names its own
        String problem = TEMPLATE_CHECKS.computeIfAbsent(EncodeOptions.sha256(source) + "/" + builtIn + "/" + choice, k -> {
            try {
                if (choice == ChatTemplateChoice.MODEL) {
                    JinjaChatRenderer.compile(source);
                    return "";
                }
                return compare.apply(source).map(d -> "renders differently from Stoker's built-in " + builtIn + " template: " + d.message()
                        + "; to encode with the model's own template, add --chat-template model").orElse("");
            } catch (ChatTemplateException e) {
                return "cannot be used: " + e.getMessage();
            }
        });
        if (!problem.isEmpty()) throw new ConfigException("--model: the chat template of " + file + " " + problem);
    }

    /** The SHA-256 of {@code file}, hex; a file that cannot be read is refused, naming it. */
    static String sha256(Path file) {
        try (var in = Files.newInputStream(file)) {
            var md = MessageDigest.getInstance("SHA-256");
            byte[] buf = new byte[1 << 16];
            for (int n; (n = in.read(buf)) > 0; ) md.update(buf, 0, n);
            return HexFormat.of().formatHex(md.digest());
        } catch (NoSuchFileException e) {
            throw new ConfigException(file + ": no such file");
        } catch (IOException e) {
            throw new ConfigException(file + ": cannot read: " + e.getMessage());
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
