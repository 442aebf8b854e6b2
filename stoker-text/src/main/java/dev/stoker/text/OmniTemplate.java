package dev.stoker.text;

import dev.stoker.core.AudioPreset;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * The built-in {@link ChatRenderer} of an audio family ({@link AudioPreset}), rendering a chat for SFT
 * ({@code add_generation_prompt=False}, no vision or audio ids) as the family's chat template does, and its tokenization
 * with the bundled Qwen2 tokenizer.
 *
 * <p>Qwen2-Audio (transformers 5.18.0 {@code Qwen2AudioProcessor.default_chat_template}) and Qwen2.5-Omni (the template of
 * transformers' {@code test_processor_qwen2_5_omni.py}, as published with the model) insert
 * {@code "You are a helpful assistant."} as a system turn when the first message is not one, then emit every message as
 * {@code <|im_start|>ROLE\nCONTENT<|im_end|>\n}: an audio clip is {@code <|audio_bos|><|AUDIO|><|audio_eos|>} (Qwen2-Audio:
 * {@code Audio N: <|audio_bos|><|AUDIO|><|audio_eos|>\n}, N counting from 1 over the chat), an image
 * {@code <|vision_bos|><|IMAGE|><|vision_eos|>}, a video {@code <|vision_bos|><|VIDEO|><|vision_eos|>}. Qwen2-Audio's
 * template has no image or video item (it would drop them silently): they are refused. {@code OmniTemplateTest} holds
 * both against the published Jinja sources run by {@link JinjaChatRenderer}. Qwen3-Omni: the Qwen3-VL rendering (no default
 * system) with {@code <|audio_start|><|audio_pad|><|audio_end|>} for a clip; its published template was not available to
 * check against (see {@link AudioPreset}), so a model folder's own template is the exact path for it.
 *
 * <p>Tokenization ({@link #tokenize}): the bundled tokenizer is Qwen2's, whose added tokens at 151646–151648 and 151652–151656
 * carry the Qwen-VL names, and which lacks Qwen3-Omni's 151669–151675. The rendered text is therefore split at the family's
 * special strings, which are added tokens of the family's own tokenizer and so never merge with their neighbours, the text
 * between them is tokenized, and the family's ids are put in between. Text that would tokenize to one of the family's
 * special ids (for instance a literal {@code <|object_ref_start|>}, 151646 in the bundled vocabulary, which is Qwen2.5-Omni's
 * {@code <|AUDIO|>}) is refused: it would shift clips against their features.
 *
 * <p>Threading: immutable; safe to share.
 */
public final class OmniTemplate implements ChatRenderer {
    private final AudioPreset preset;
    private final String[] specials;
    private final long[] specialIds;

    public OmniTemplate(AudioPreset preset) {
        this.preset = Objects.requireNonNull(preset, "preset");
        var s = new ArrayList<String>(List.of(preset.audioToken(), preset.audioStart(), preset.audioEnd()));
        var ids = new ArrayList<Long>(List.of(preset.audioTokenId(), preset.audioStartId(), preset.audioEndId()));
        if (preset.hasVision()) {
            s.addAll(List.of(preset.imageToken(), preset.videoToken(), preset.visionStart(), preset.visionEnd()));
            ids.addAll(List.of(preset.imageTokenId(), preset.videoTokenId(), preset.visionStartId(), preset.visionEndId()));
        }
        specials = s.toArray(String[]::new);
        specialIds = ids.stream().mapToLong(Long::longValue).toArray();
    }

    public AudioPreset preset() { return preset; }

    @Override
    public void render(List<Message> messages, StringBuilder out) {
        var system = preset.defaultSystem();
        if (system != null && (messages.isEmpty() || messages.getFirst().role() != Message.Role.SYSTEM))
            out.append(ChatTemplate.IM_START).append("system\n").append(system).append(ChatTemplate.IM_END).append('\n');
        int audios = 0;
        for (var m : messages) {
            out.append(ChatTemplate.IM_START).append(m.role().wireName()).append('\n');
            for (var p : m.parts()) {
                switch (p) {
                    case Message.Text t -> out.append(t.text());
                    case Message.Audio _ -> {
                        audios++;
                        if (preset.numberedAudio()) out.append("Audio ").append(audios).append(": ");
                        out.append(preset.audioStart()).append(preset.audioToken()).append(preset.audioEnd());
                        if (preset.numberedAudio()) out.append('\n');
                    }
                    case Message.Image i -> out.append(preset.visionStart()).append(vision(preset.imageToken(), "image " + i.ref())).append(preset.visionEnd());
                    case Message.Video v -> out.append(preset.visionStart())
                            .append(vision(preset.videoToken(), "video " + (v.isFrameList() ? v.frames().size() + " frames" : v.ref())))
                            .append(preset.visionEnd());
                }
            }
            out.append(ChatTemplate.IM_END).append('\n');
        }
    }

    private String vision(String token, String what) {
        if (token == null) throw new IllegalArgumentException(what + ": " + preset + " takes audio and text only (its template has no image or video item)");
        return token;
    }

    /**
     * The ids of a chat rendered for this family (by {@link #render} or by the model's own template), one pad per media
     * item, ready for {@link OmniTokens#expand}.
     *
     * @throws IllegalArgumentException when a text run would tokenize to one of the family's special ids
     */
    public long[] tokenize(String rendered, QwenTokenizer tokenizer) {
        var out = new OmniTokens.LongList(rendered.length() / 3 + 16);
        int pos = 0;
        while (pos <= rendered.length()) {
            int at = rendered.length(), which = -1;
            for (int k = 0; k < specials.length; k++) {
                int i = rendered.indexOf(specials[k], pos);
                if (i >= 0 && i < at) { at = i; which = k; }
            }
            if (at > pos) {
                var piece = rendered.substring(pos, at);
                for (long id : tokenizer.encode(piece)) {
                    for (long s : specialIds)
                        if (id == s)
                            throw new IllegalArgumentException("text '" + abbreviate(piece) + "' holds token id " + id + ", which is " + preset
                                    + "'s " + specials[indexOf(specialIds, s)] + " (in the bundled Qwen2 vocabulary another special token)");
                    out.add(id);
                }
            }
            if (which < 0) break;
            out.add(specialIds[which]);
            pos = at + specials[which].length();
        }
        return out.toArray();
    }

    private static int indexOf(long[] a, long v) {
        for (int i = 0; i < a.length; i++) if (a[i] == v) return i;
        return -1;
    }

    private static String abbreviate(String s) {
        return s.length() <= 60 ? s : s.substring(0, 57) + "...";
    }
}
