use super::agent::keywords_reply;
use super::words::{capitalised_name, cue_words, event_id_of, quoted_question};

#[test]
fn helpers() {
    assert_eq!(
        cue_words("Lena adopted a grey kitten called Pixel, the kitten!"),
        ["lena", "adopted", "grey", "kitten", "called", "pixel"]
    );
    assert_eq!(event_id_of("Time:2023-05-06 D1:2-1:Lena: hi"), "D1:2-1");
    assert_eq!(event_id_of("D1:t1:Session 1"), "D1:t1");
    assert_eq!(capitalised_name("Where did Lena's kitten sleep?").as_deref(), Some("Lena"));
    assert_eq!(quoted_question(r#"QUESTION: <<<"What \"is\" it?">>>"#), r#"What "is" it?"#);
    let reply = keywords_reply("What did Lena do in May 2023?");
    assert_eq!(reply["question_time"], "2023-05-01, 2023-05-31");
}
