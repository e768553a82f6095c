//! Messages as data for `-o json` and `-o yaml`: every field of the proto message under its
//! proto name (snake_case), defaults included, absent optionals as null, enums as their words,
//! maps with sorted keys, so scripts can rely on the shape. The shape is the proto's own serde
//! derive (`crates/proto/build.rs`), the one the dashboard's JSON endpoints answer with, so a
//! field added to the proto shows here without a second list to keep.

use serde_json::Value;

pub trait ToData {
    fn to_data(&self) -> Value;
}

impl<T: serde::Serialize + ?Sized> ToData for T {
    fn to_data(&self) -> Value {
        // A generated message always serializes: its fields are numbers, strings, maps with
        // string keys, and other messages. serde_json's Map sorts its keys.
        serde_json::to_value(self).expect("a proto message serializes to JSON")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::v1;
    use baton_proto::words::Word;

    #[test]
    fn every_field_of_a_job_is_in_its_data() {
        let job = v1::Job {
            id: 7,
            state: v1::JobState::Pending as i32,
            spec: Some(v1::JobSpec { name: "train".into(), queue: "team-a".into(), ..Default::default() }),
            ..Default::default()
        };
        let data = job.to_data();
        let fields = data.as_object().unwrap();
        // Fields the hand-written mapping dropped are here: whatever the proto carries.
        for field in ["owner", "run_as", "reservation", "env_hidden"] {
            assert!(fields.contains_key(field), "{field} missing from {data}");
        }
        assert_eq!(data["reservation"], Value::Null, "an absent optional is null");
        assert_eq!(data["state"], v1::JobState::Pending.word(), "an enum is its word");
        assert_eq!(data["spec"]["name"], "train");
    }
}
