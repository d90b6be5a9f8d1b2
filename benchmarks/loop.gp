# Checkpointed loops: time and peak memory of one gradient against the number
# of snapshots, for RK4 Lotka-Volterra over 10^5 steps.  From the repository root:
#   build/benchmarks/loop-bench --gnuplot loop.tsv
#   gnuplot -e "data='loop.tsv'" benchmarks/loop.gp      (writes docs/loop.png)
# data: loop-bench's --gnuplot file; out: the png (default docs/loop.png)
if (!exists("data")) data = 'loop.tsv'
if (!exists("out")) out = 'docs/loop.png'
set terminal pngcairo size 1200,500 font ",10"
set output out

set datafile separator "\t"
set key top right box opaque
set grid
set logscale x
set xrange [3:2e5]
set format x "10^{%L}"
set xlabel 'snapshots S'
set multiplot layout 1,2 title 'ad\_checkpointed\_loop: Lotka-Volterra, RK4, 10^5 steps (loop-bench)'

# Left: time per gradient.  Few snapshots recompute steps many times; from
# the default (r = 2: each step advanced at most twice) on, more buy little.
set title 'time per gradient (median)'
set ylabel 'ms'
set yrange [0:*]
stats data using 8 nooutput
plain_ms = STATS_max
plot data using 1:2 with linespoints lw 2 pt 7 title 'checkpointed', \
     data using 1:($7 == 1 ? $2 : 1/0) with points pt 6 ps 3 lw 2 lc rgb 'black' title 'default S (snapshots = 0)', \
     plain_ms with lines dt 2 lw 2 lc rgb '#aa3333' title 'plain recorded gradient', \
     3 * plain_ms with lines dt 3 lw 2 lc rgb '#555555' title '3x plain (target)'

# Right: peak resident memory above an idle process's, log scale, against
# the plain gradient's; and the snapshots alone (ad_tape_stats), which are
# below a page until S is in the thousands.
set title 'peak resident memory above an idle process'
set ylabel 'MiB'
set logscale y
set format y "10^{%L}"
stats data using 9 nooutput
plain_mib = STATS_max
set yrange [*:100 * plain_mib]  # headroom above the plain line for the key
plot data using 1:4 with linespoints lw 2 pt 7 title 'checkpointed', \
     data using 1:($7 == 1 ? $4 : 1/0) with points pt 6 ps 3 lw 2 lc rgb 'black' title 'default S (snapshots = 0)', \
     data using 1:($5 / 1024) with linespoints lw 2 pt 5 lc rgb '#3377aa' title 'snapshots (snapshot\_bytes)', \
     plain_mib with lines dt 2 lw 2 lc rgb '#aa3333' title 'plain recorded gradient'
unset multiplot
