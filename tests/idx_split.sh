# Sourced by the shell tests that train the kiln program on a small dataset.
# make_split DIR PREFIX COUNT SEED: IDX files of COUNT 8x8 images in 10
# classes; class c lights up every pixel whose index is c modulo 10, over
# low noise, so a small MLP learns it within an epoch or two.
make_split() {
  perl -e '
    my ($dir, $prefix, $n, $state) = @ARGV;
    sub rnd { $state = ($state * 1103515245 + 12345) % 2147483648; return $state % 256; }
    open(my $img, ">:raw", "$dir/$prefix-images-idx3-ubyte") or die $!;
    open(my $lab, ">:raw", "$dir/$prefix-labels-idx1-ubyte") or die $!;
    print $img pack("N4", 0x803, $n, 8, 8);
    print $lab pack("N2", 0x801, $n);
    for my $i (0 .. $n - 1) {
      my $label = rnd() % 10;
      print $lab pack("C", $label);
      print $img pack("C*", map { $_ % 10 == $label ? 160 + rnd() % 96 : rnd() % 64 } 0 .. 63);
    }' "$@"
}
