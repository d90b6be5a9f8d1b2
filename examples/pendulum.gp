# The pendulum swing-up's solution: examples/ipopt_pendulum N --out pendulum.dat,
# then gnuplot -e "data='pendulum.dat'" examples/pendulum.gp (writes pendulum.png).
if (!exists("data")) data = 'pendulum.dat'
set terminal pngcairo size 900,600
set output 'pendulum.png'
set multiplot layout 2,1 title 'Pendulum swing-up: Ipopt with exact sparse Hessians (dualrev)'
set xlabel 't (s)'
set ylabel 'angle, rate'
set key top left
plot data using 1:2 with lines lw 2 title 'theta', data using 1:3 with lines lw 2 title 'omega'
set ylabel 'torque u'
set yrange [-1.6:1.6]
plot data using 1:4 with lines lw 2 lc rgb '#aa3333' title 'u'
unset multiplot
