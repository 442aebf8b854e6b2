package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.text.Message.Audio;
import dev.stoker.text.Message.Role;
import dev.stoker.text.Message.Text;
import dev.stoker.text.Message.Video;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Audio records (issue 32) as a parser for an audio-capable processor ({@link SampleParser.Audios#ACCEPT}) reads them:
 * LLaMA-Factory's demos ({@code data/mllm_audio_demo.json}, {@code mllm_video_audio_demo.json}), ShareGPT, HF typed
 * items, and {@code use_audio_in_video}; and the same records still refused by the default (Qwen-VL) parser.
 */
@Timeout(60)
class AudioRecordsTest {
    private final SampleParser omni = new SampleParser(SampleParser.Videos.ACCEPT, null, SampleParser.Audios.ACCEPT);
    private final SampleParser audioOnly = new SampleParser(SampleParser.Videos.REFUSE, null, SampleParser.Audios.ACCEPT);
    private final SampleParser qwenVl = new SampleParser(SampleParser.Videos.ACCEPT, null, SampleParser.Audios.REFUSE);

    private static ChatSample parse(SampleParser parser, String json) {
        return parser.parseLine(json.getBytes(StandardCharsets.UTF_8), "demo.json[0]");
    }

    private static String refusal(SampleParser parser, String json) {
        var e = assertThrows(SampleException.class, () -> parse(parser, json), json);
        assertEquals(SampleException.Stage.MANIFEST, e.stage());
        assertEquals("demo.json[0]", e.sampleId());
        return e.getMessage();
    }

    private static final String AUDIO_DEMO = """
        {"messages": [{"content": "<audio>What's that sound?", "role": "user"},
                      {"content": "It is the sound of glass shattering.", "role": "assistant"}],
         "audios": ["mllm_demo_data/1.mp3"]}""";
    private static final String VIDEO_AUDIO_DEMO = """
        {"messages": [{"content": "<video><audio>What is the video describing?", "role": "user"},
                      {"content": "A girl who is drawing a picture of a guitar and feel nervous.", "role": "assistant"}],
         "videos": ["mllm_demo_data/4.mp4"], "audios": ["mllm_demo_data/4.mp3"]}""";

    @Test
    void llamaFactoryAudioDemoBecomesAnAudioItem() {
        var s = parse(omni, AUDIO_DEMO);
        assertEquals(List.of(new Message(Role.USER, List.of(Audio.of("mllm_demo_data/1.mp3"), new Text("What's that sound?"))),
                Message.text(Role.ASSISTANT, "It is the sound of glass shattering.")), s.messages());
        assertEquals(List.of(Audio.of("mllm_demo_data/1.mp3")), s.audios());
        assertEquals(List.of(), s.imagePaths());
        assertEquals(s.audios(), parse(audioOnly, AUDIO_DEMO).audios(), "audio does not need video accepted");
    }

    @Test
    void videoAndAudioKeepTheirOrder() {
        var s = parse(omni, VIDEO_AUDIO_DEMO);
        assertEquals(List.of(Video.of("mllm_demo_data/4.mp4"), Audio.of("mllm_demo_data/4.mp3"), new Text("What is the video describing?")),
                s.messages().getFirst().parts());
        assertEquals(List.of(Video.of("mllm_demo_data/4.mp4"), Audio.of("mllm_demo_data/4.mp3")), s.media());
        assertFalse(s.videos().getFirst().useAudioInVideo());
    }

    @Test
    void theQwenVlParserStillRefusesEveryAudioRecord() {
        assertEquals("messages[0].content: <audio> placeholder found; audio is not supported by the Qwen-VL processors", refusal(qwenVl, AUDIO_DEMO));
        assertEquals("messages[0].content: <audio> placeholder found; audio is not supported by the Qwen-VL processors", refusal(qwenVl, VIDEO_AUDIO_DEMO));
        assertEquals("messages[0].content[0]: audio content is not supported by the Qwen-VL processors", refusal(qwenVl, """
            {"messages": [{"role": "user", "content": [{"type": "audio", "audio": "a.wav"}]}, {"role": "assistant", "content": "x"}]}"""));
        assertEquals("messages[0].content[0].use_audio_in_video: audio is not supported by the Qwen-VL processors", refusal(qwenVl, """
            {"messages": [{"role": "user", "content": [{"type": "video", "video": "v.mp4", "use_audio_in_video": true}]},
                          {"role": "assistant", "content": "x"}]}"""));
        assertEquals("field 'use_audio_in_video': audio is not supported by the Qwen-VL processors", refusal(qwenVl, """
            {"messages": [{"role": "user", "content": "<video>What?"}, {"role": "assistant", "content": "x"}],
             "videos": ["v.mp4"], "use_audio_in_video": true}"""));
        // false asks for no audio: the Qwen-VL parser reads the video as before, without the key
        var s = parse(qwenVl, """
            {"messages": [{"role": "user", "content": [{"type": "video", "video": "v.mp4", "use_audio_in_video": false}]},
                          {"role": "assistant", "content": "x"}]}""");
        assertEquals(Map.of(), s.videos().getFirst().options());
    }

    @Test
    void shareGptAudiosAndLlavaStrip() {
        var s = parse(omni, """
            {"conversations": [{"from": "human", "value": " <audio> Transcribe it. "}, {"from": "gpt", "value": "hello"}],
             "audios": "clips/1.wav"}""");
        assertEquals(List.of(new Text(" "), Audio.of("clips/1.wav"), new Text(" Transcribe it. ")), s.messages().getFirst().parts(),
                "ShareGPT (LLaMA-Factory) keeps the text verbatim");
        var llava = parse(omni, """
            {"image": "a.jpg", "audios": ["b.wav"],
             "conversations": [{"from": "human", "value": "<image>\\n<audio>\\nBoth?"}, {"from": "gpt", "value": "yes"}]}""");
        assertEquals(List.of(new Message.Image("a.jpg"), Audio.of("b.wav"), new Text("Both?")), llava.messages().getFirst().parts(),
                "LLaVA strips the segments around placeholders, audio as image");
    }

    @Test
    void typedAudioItems() {
        var s = parse(omni, """
            {"messages": [{"role": "user", "content": [
                {"type": "audio", "audio": "s3://bucket/a.flac", "audio_start": 1.5, "audio_end": 4},
                {"type": "audio_url", "audio_url": {"url": "https://x/b.mp3"}},
                {"audio": "c.wav"},
                {"type": "text", "text": "<audio> is literal here"}]},
              {"role": "assistant", "content": "ok"}]}""");
        assertEquals(List.of(new Audio("s3://bucket/a.flac", Map.of("audio_start", 1.5, "audio_end", 4L)),
                Audio.of("https://x/b.mp3"), Audio.of("c.wav")), s.audios());
        assertEquals(new Text("<audio> is literal here"), s.messages().getFirst().parts().get(3));
        assertEquals(List.of("audio_start", "audio_end"), List.copyOf(s.audios().getFirst().options().keySet()), "record order kept");
    }

    @Test
    void useAudioInVideoPerItemAndPerRecord() {
        var typed = parse(omni, """
            {"messages": [{"role": "user", "content": [{"type": "video", "video": "v.mp4", "fps": 2, "use_audio_in_video": true},
                                                       {"type": "text", "text": "What is said?"}]},
                          {"role": "assistant", "content": "x"}]}""");
        assertTrue(typed.videos().getFirst().useAudioInVideo());
        assertEquals(2L, typed.videos().getFirst().options().get("fps"));
        var record = parse(omni, """
            {"messages": [{"role": "user", "content": "<video><video>Same?"}, {"role": "assistant", "content": "x"}],
             "videos": ["a.mp4", "b.mp4"], "use_audio_in_video": true}""");
        assertTrue(record.videos().stream().allMatch(Video::useAudioInVideo));
        assertEquals("video 2 has use_audio_in_video false but video 1 has true; the processor and the model's positions take one value per sample",
                refusal(omni, """
            {"messages": [{"role": "user", "content": [{"type": "video", "video": "a.mp4", "use_audio_in_video": true},
                                                       {"type": "video", "video": "b.mp4"}]},
                          {"role": "assistant", "content": "x"}]}"""));
        assertEquals("video 1 is a list of 2 frame images, which has no audio track, but use_audio_in_video is true", refusal(omni, """
            {"messages": [{"role": "user", "content": "<video>What?"}, {"role": "assistant", "content": "x"}],
             "videos": [["f1.jpg", "f2.jpg"]], "use_audio_in_video": true}"""));
        assertEquals("messages[0].content[0].use_audio_in_video: expected a boolean, got string", refusal(omni, """
            {"messages": [{"role": "user", "content": [{"type": "video", "video": "a.mp4", "use_audio_in_video": "yes"}]},
                          {"role": "assistant", "content": "x"}]}"""));
        assertEquals("field 'use_audio_in_video': expected a boolean, got number", refusal(omni, """
            {"messages": [{"role": "user", "content": "<video>What?"}, {"role": "assistant", "content": "x"}],
             "videos": ["a.mp4"], "use_audio_in_video": 1}"""));
    }

    @Test
    void badAudioRecordsNameTheCause() {
        assertEquals("the messages have 1 <audio> placeholder(s) but the record lists 2 audio clip(s) in 'audios'", refusal(omni, """
            {"messages": [{"role": "user", "content": "<audio>?"}, {"role": "assistant", "content": "x"}], "audios": ["a.wav", "b.wav"]}"""));
        assertEquals("the messages have 1 <audio> placeholder(s) but the record lists 0 audio clip(s) (no 'audio' or 'audios' field)", refusal(omni, """
            {"messages": [{"role": "user", "content": "<audio>?"}, {"role": "assistant", "content": "x"}]}"""));
        assertEquals("messages[0].content[0]: inline audio data (input_audio) is not supported; give the clip as {\"type\": \"audio\", \"audio\": PATH | URI}",
                refusal(omni, """
            {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}}]},
                          {"role": "assistant", "content": "x"}]}"""));
        assertEquals("field 'audios' lists 1 audio clip(s) but the record uses none: its content is typed (messages[0].content is an array), "
                + "where audio clips are content items", refusal(omni, """
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": "x"}],
             "audios": ["a.wav"]}"""));
        assertEquals("messages[1].content: <audio> placeholder in string content, but messages[0].content is typed (an array); "
                + "a record uses typed audio items or placeholders, not both", refusal(omni, """
            {"messages": [{"role": "user", "content": [{"type": "audio", "audio": "a.wav"}]}, {"role": "assistant", "content": "<audio>"}]}"""));
        assertEquals("field 'audios[0]': expected a string (a path or URI), got number", refusal(omni, """
            {"messages": [{"role": "user", "content": "<audio>"}, {"role": "assistant", "content": "x"}], "audios": [3]}"""));
        assertEquals("messages[0].content[0]: audio item has no 'audio', 'audio_url', 'url' or 'path'", refusal(omni, """
            {"messages": [{"role": "user", "content": [{"type": "audio"}]}, {"role": "assistant", "content": "x"}]}"""));
        assertEquals("messages[0].content[0]: an item is a video or an audio clip, not both; give the clip as its own {\"type\": \"audio\"} item "
                + "(or use_audio_in_video for the video's own track)", refusal(omni, """
            {"messages": [{"role": "user", "content": [{"type": "video", "video": "v.mp4", "audio": "a.wav"}]}, {"role": "assistant", "content": "x"}]}"""));
        assertEquals("has both 'audio' and 'audios'; expected one", refusal(omni, """
            {"messages": [{"role": "user", "content": "<audio>"}, {"role": "assistant", "content": "x"}], "audio": "a.wav", "audios": ["b.wav"]}"""));
        assertEquals("messages[0].content: <video> placeholder found; video is not supported", refusal(audioOnly, VIDEO_AUDIO_DEMO),
                "an audio-only parser (Qwen2-Audio) still refuses video");
    }

    @Test
    void theQwenVlTemplateRefusesAnAudioPart() {
        var s = parse(omni, AUDIO_DEMO);
        var e = assertThrows(IllegalArgumentException.class,
                () -> new ChatTemplate(dev.stoker.core.ProcessorPreset.ChatFamily.QWEN2_VL).render(s.messages()));
        assertTrue(e.getMessage().contains("mllm_demo_data/1.mp3"), e.getMessage());
    }

    /** A record whose source carries its clips (a tar's audio members, a Parquet audio column), as the readers hand it over. */
    private static ChatSample carried(SampleParser parser, String json, List<String> clips) {
        return parser.parseRecord(json.getBytes(StandardCharsets.UTF_8), "s.tar:k", List.of(), List.of(), clips);
    }

    @Test
    void carriedClipsTakeThePlacesOfTheRecordsAudioInOrder() {
        // no list: the carried clips are the record's audios, taken by its placeholders
        var bare = carried(omni, """
            {"messages": [{"content": "<audio><audio>Which?", "role": "user"}, {"content": "The first.", "role": "assistant"}]}""",
                List.of("k.0.wav", "k.1.flac"));
        assertEquals(List.of(Audio.of("k.0.wav"), Audio.of("k.1.flac")), bare.audios());
        // a list (LLaMA-Factory's, naming files elsewhere): as many, replaced in order
        var listed = carried(omni, AUDIO_DEMO, List.of("k.mp3"));
        assertEquals(List.of(Audio.of("k.mp3")), listed.audios());
        // typed items: a bare one named after the clip of its place, a named one replaced, each keeping its keys
        var typed = carried(omni, """
            {"messages": [{"role": "user", "content": [{"type": "audio"}, {"type": "audio", "audio": "x.wav", "audio_start": 0.5},
                                                      {"type": "text", "text": "Compare."}]},
                          {"role": "assistant", "content": [{"type": "text", "text": "Same."}]}]}""", List.of("k.0.wav", "k.1.wav"));
        assertEquals(List.of(Audio.of("k.0.wav"), new Audio("k.1.wav", Map.of("audio_start", 0.5))), typed.audios());
        // a count that differs is the sample's error, naming both
        var e = assertThrows(SampleException.class, () -> carried(omni, AUDIO_DEMO, List.of("k.0.wav", "k.1.wav")));
        assertTrue(e.getMessage().contains("audio"), e.getMessage());
        // the Qwen-VL parser refuses a record that carries clips, with its usual words, naming the first
        var vl = assertThrows(SampleException.class, () -> carried(qwenVl, """
            {"messages": [{"content": "Hi", "role": "user"}, {"content": "Hello.", "role": "assistant"}]}""", List.of("k.0.wav", "k.1.wav")));
        assertEquals("audio is not supported by the Qwen-VL processors: the record's source carries audio k.0.wav and 1 more", vl.getMessage());
        assertEquals("s.tar:k", vl.sampleId());
    }
}
