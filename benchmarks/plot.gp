# Plots the TSV files dualrev-bench wrote (run.sh calls this):
#   gnuplot -e "dir='benchmarks/results'; term='svg'" benchmarks/plot.gp
# dir:  where programs.tsv, tbad.tsv and cache.tsv are; the plot is written there too
# term: svg (default) or png
if (!exists("dir")) dir = "benchmarks/results"
if (!exists("term")) term = "svg"

if (term eq "png") {
    set terminal pngcairo size 1650,660 font ",10"
    set output dir."/bench.png"
} else {
    set terminal svg size 1650,660 dynamic font ",10"
    set output dir."/bench.svg"
}

set datafile separator "\t"
set datafile missing "-"
set key top left box opaque
set grid
set multiplot layout 1,3

# Left: t_bad.  A flat line is constant time per operation, the point of
# the paper's section 5.4.
set title "t\\_bad: time per operation (median)"
set logscale x
set logscale y
set format x "10^{%L}"
set xlabel "n (operations)"
set ylabel "ns per operation"
plot dir."/tbad.tsv" using 1:4 with linespoints lw 2 pt 7 title "dualrev gradient", \
     ""              using 1:6 with linespoints lw 2 pt 5 title "ADOL-C taping + gradient", \
     ""              using 1:7 with linespoints lw 2 pt 9 title "ADOL-C gradient (reused tape)", \
     ""              using 1:3 with linespoints lw 2 pt 13 title "plain double"

# Right: the Table 1 programs, gradient time over plain-double time.
unset logscale x
set format x "%g"
set title "Table 1 programs: gradient time / plain-double time (log scale)"
set xlabel ""
set ylabel "gradient / plain"
set xtics rotate by 90 right noenhanced  # upright labels cannot overlap
set bmargin 15
set autoscale x
set offsets 0.6, 0.6, 0, 0
set yrange [1:1e5]  # headroom above the bars for the key
label(p, n) = (p eq "scalar mult" || p eq "rotate_vec_by_quat") ? p : sprintf("%s n=10^%.0f", p, log10(n))
plot dir."/programs.tsv" using ($0 - 0.2):9:xtic(label(strcol(1), $2)) with impulses lw 8 title "dualrev", \
     ""                  using ($0):12 with impulses lw 8 title "ADOL-C taping + gradient", \
     ""                  using ($0 + 0.2):13 with impulses lw 8 title "ADOL-C gradient (reused tape)", \
     4 with lines dt 2 lc rgb "black" title "target: 4x (dot, sum-mat-vec)"

# Third: GMM's inner loop on tapes from what the first-level cache holds to
# what only memory does.  Flat lines: the ratio is the work per record, not
# the memory the tape takes.
set title "GMM's inner loop (d = 64): gradient / plain double as the tape grows"
set logscale x
set format x "%g"
set xtics norotate
set bmargin
set offsets 0, 0, 0, 0
set xrange [0.03:1000]
set yrange [1:1000]
set xlabel "tape (MiB)"
set ylabel "gradient / plain"
plot dir."/cache.tsv" using 3:6 with linespoints lw 2 pt 7 title "dualrev gradient", \
     ""               using 3:7 with linespoints lw 2 pt 5 title "ADOL-C taping + gradient", \
     10 with lines dt 2 lc rgb "black" title "GMM's target for scalar code: 10x"

unset multiplot
