use overlap::{Communicator, GradBucket};

fn main() {
    let comm = Communicator::single();
    let bucket = GradBucket::zeros(0, 4);
    let in_flight = comm.all_reduce_async(bucket);
    // Only `in_flight.wait()` gives the data back.
    let _ = bucket.as_slice();
    let _ = in_flight.wait();
}
