from localspec.engine.text import TextStream


def test_multibyte_character_is_never_split():
    s = TextStream()
    data = "é世".encode()
    out = [s.push(data[i : i + 1]) for i in range(len(data))]
    assert out == ["", "é", "", "", "世"]
    assert s.finish() == ""
    assert s.text == "é世"


def test_invalid_bytes_become_replacement_characters_and_a_cut_off_character_is_dropped():
    s = TextStream()
    assert s.push(b"a\xff") == "a\ufffd"
    assert s.push(b"\xe4") == ""
    # Generation ended inside a character (a token limit halfway through an emoji): no U+FFFD at the end.
    assert s.finish() == "" and s.text == "a\ufffd"
    half_emoji = TextStream()
    half_emoji.push("ok ".encode() + "😀".encode()[:2])
    assert half_emoji.finish() == "" and half_emoji.text == "ok "


def test_stop_string_across_tokens_is_held_back_then_cut():
    s = TextStream(["</end>"])
    assert s.push(b"hello </") == "hello "
    assert s.push(b"en") == ""
    assert s.push(b"d> more") == ""
    assert s.stopped
    assert s.text == "hello "


def test_held_prefix_released_when_it_does_not_complete():
    s = TextStream(["STOP"])
    assert s.push(b"ab ST") == "ab "
    assert s.push(b"ART") == "START"
    assert s.push(b" S") == " "
    assert s.finish() == "S"
    assert s.text == "ab START S"


def test_earliest_of_several_stop_strings_wins():
    s = TextStream(["xyz", "b"])
    assert s.push(b"a b xyz") == "a "
    assert s.stopped


def test_nothing_after_stop():
    s = TextStream(["!"])
    s.push(b"hi!")
    assert s.push(b"more") == ""
    assert s.finish() == ""
